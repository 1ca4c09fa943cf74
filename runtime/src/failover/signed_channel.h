// A slice's rail with the operation's signature in its first frames: the cross-rank check that
// every rank is in the same operation with the same arguments (Communicator::signNextOp),
// folded into the data path instead of a message or a round of its own.
//
// The first exchange the slice's algorithm posts goes out with the signed header
// (op_header.h, "NZOS": operation number + signature) in front: a send to every peer and a
// receive from every peer, posted ahead of the algorithm's own ops in the same exchange. The
// transport orders ops to one peer in posting order (transport/channel.h), so each header is
// the first thing of the slice between every pair, and the algorithm's data follows on the
// same connections without waiting for it: the header costs 44 bytes per peer and direction,
// no round trip. It is posted as one element (align = its length), so a transport never cuts
// it across a peer's streams; TCP sends it in the same gathered write as the data queued
// behind it on its stream and reads both in one call (transport/tcp/tcp_channel.cc, pump()), so on
// TCP it adds no system call or segment of its own. After that exchange this rank holds every
// peer's header and compares: a peer in another operation or with other bytes fails the
// slice with MismatchError. Every rank of the rail receives every header, so a rank whose exchange
// completes sees any disagreement itself, whatever the algorithm's own pattern (a ring's
// neighbours alone would let ranks whose neighbours agree with them finish with a wrong
// result). A rank whose exchange cannot complete (it waits for data a disagreeing peer never
// sends) fails on the rail instead: the engine (failover_engine.cc, checkSignatures) then
// takes the operation to its round, which carries every rank's signature and whether it saw
// a mismatch, so every rank ends the operation with the same MismatchError; the rank that
// saw it aborts its rails first, so nobody waits for a deadline.
//
// Why every peer and not only the algorithm's partners: a rank must not accept a result before
// it knows that no rank disagreed, and only the all-to-all of headers tells it in the same
// exchange; the operations' agreement round (failover_engine.h) would tell it too, but small
// operations skip it (round-free) and waiting for one costs a message latency per operation.
// The price is 2·(N-1) small ops per slice, folded into the data's writes to the peers the
// algorithm talks to in its first exchange and writes of their own to the others: nothing
// next to the data at the world sizes this runs at, worth revisiting at hundreds of ranks.
#pragma once

#include <string>
#include <vector>

#include "failover/op_header.h"
#include "transport/channel.h"

namespace nezha {

class SignedChannel : public Channel {
 public:
  // `signature`: kOpSignatureBytes long. `inner` must outlive this object.
  SignedChannel(Channel& inner, uint64_t op, std::string signature);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int railIndex() const override { return inner_.railIndex(); }
  const std::string& name() const override { return inner_.name(); }
  // The first call carries the headers and throws MismatchError on a disagreement.
  void exchange(std::vector<IoOp>& ops) override;
  void abort() override { inner_.abort(); }
  void setProgressTimeout(std::chrono::milliseconds t) override { inner_.setProgressTimeout(t); }
  void setPeersStillComing(std::function<bool()> fn) override {
    inner_.setPeersStillComing(std::move(fn));
  }
  void setProgressWatch(ProgressWatch fn) override { inner_.setProgressWatch(std::move(fn)); }
  CollectiveOffload* offload() override { return inner_.offload(); }

  // The headers went out (the slice's algorithm exchanged at least once). A slice whose
  // algorithm posts nothing (an offloaded reduction, an empty slice) carries no header on
  // any rank running the same plan.
  bool sent() const { return sent_; }

 private:
  // Compares the headers received whole; throws MismatchError when one disagrees.
  void compare(const std::vector<size_t>& received) const;

  Channel& inner_;
  const uint64_t op_;
  const std::string signature_;
  const std::string header_;         // this rank's, encoded
  std::vector<std::string> theirs_;  // by peer, kSignedHeaderBytes each
  bool sent_ = false;
};

// Every rank's signature and operation number as one rank saw them (`signatures[r]` empty and
// `ops[r]` -1: not seen), described for a MismatchError: which ranks hold which bytes.
std::string describeMismatch(uint64_t op, const std::vector<std::string>& signatures,
                             const std::vector<int64_t>& ops);

}  // namespace nezha
