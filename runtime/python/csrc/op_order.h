// Which priority-scheduled collective runs next, decided once for all ranks (the TaLB seed:
// ../README.md, "Priority scheduling").
//
// Every rank issues collectives in the same order and libnezha needs every rank to run them in
// the same order, so a rank may only run a later operation first if all ranks do the same.
// Rank 0 decides: when its worker is free and the operation at the front of its queue has a
// priority, it picks the highest-priority one of the consecutive prioritised operations at the
// front (ties: issue order) and announces its issue number to every other rank; the others run
// exactly that operation next, once they have issued it themselves (they will: same sequence
// of operations everywhere). Operations without a priority keep the old path: run in issue
// order, no message. Why a leader and not a rule every rank evaluates locally: what is queued
// when a worker becomes free differs between ranks (backward runs at different speeds), so a
// local rule would pick different operations; one rank's view, shared, is consistent by
// construction and costs one small message per prioritised operation.
//
// The decisions travel on the backend's PeerLinks (authenticated, one TCP link per pair) with
// a reserved tag no user tag can take (torch passes int tags; this one is above 2^32).
#pragma once

#include <cstdint>

#include "p2p.h"

namespace nezha_torch {

class OrderChannel {
 public:
  // `links` must outlive this object.
  OrderChannel(PeerLinks& links, int rank, int size) : links_(links), rank_(rank), size_(size) {}

  bool leader() const { return rank_ == 0; }

  // Leader: tells every other rank that operation `seq` runs next. Throws if a link failed.
  void announce(uint64_t seq);

  // Follower: blocks until the leader's next decision arrives (in the order they were sent).
  // Throws if the link to rank 0 failed or the process group was shut down.
  uint64_t next();

  static constexpr int64_t kTag = int64_t(1) << 40;

 private:
  PeerLinks& links_;
  const int rank_, size_;
};

}  // namespace nezha_torch
