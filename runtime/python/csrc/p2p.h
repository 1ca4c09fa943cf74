// Point-to-point messages with tags between the ranks of a NezhaBackend (send/recv for
// pipeline parallelism). libnezha's operations are collective: every rank takes part in each
// one (operation numbering, per-operation failure agreement), so a transfer between two ranks
// cannot be one of them. PeerLinks is a separate full mesh of TCP connections, one per pair,
// bound to the address of the job's first rail and authenticated with the job token by the
// rails' own handshake (bootstrap/auth.h: HMAC challenge-response, the token itself never
// crosses the wire; the claimed link, "p2p from=<rank> to=<rank> at=<listener>", is bound into
// both proofs). Messages are framed with base/wire.h: tag and length (u64 little-endian each),
// then the bytes. Addresses are exchanged through torch's store. Not striped across rails and not
// failover-protected: a lost link fails the sends and receives that need it (errors on
// wait(), never a hang); see runtime/python/README.md.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "base/socket.h"

namespace nezha_torch {

class PeerLinks {
 public:
  // Listens on `address`, publishes it in `store`, then connects to every higher rank and
  // accepts every lower one; throws (naming the peer) if that does not finish within
  // `timeout`.
  PeerLinks(c10d::Store& store, int rank, int size, const std::string& address,
            const std::string& token, std::chrono::milliseconds timeout);
  ~PeerLinks();  // close()
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // Sends one message (blocking until the kernel has it). Throws if the link to `peer` is
  // broken.
  void send(int peer, int64_t tag, const void* data, size_t len);

  // Called once per posted receive: with the sender and the message, or with an error.
  using Deliver = std::function<void(int src, const std::vector<char>* msg, std::exception_ptr)>;
  // Matches the oldest message from `src` (-1: any rank) with `tag`; messages with the same
  // sender and tag are delivered in the order they were sent. `deliver` runs inline if the
  // message is already here, else on the reader thread of the link it arrives on.
  void post(int src, int64_t tag, Deliver deliver);

  // Closes every link, joins the readers and fails every receive still waiting; later sends
  // and receives fail at once (idempotent). Call it without the GIL: a reader delivering into
  // a tensor may take it.
  void close();

 private:
  struct Link {
    nezha::Fd fd;
    std::mutex writeMu;
    std::thread reader;
  };
  struct Message {
    int src;
    std::vector<char> data;
  };
  struct Posted {
    int src;
    int64_t tag;
    Deliver deliver;
  };

  void connectTo(int peer, const std::string& where, std::chrono::milliseconds timeout);
  void acceptFrom(std::chrono::milliseconds timeout);
  void startReader(int peer);
  void readLoop(int peer);
  void linkFailed(int peer, const std::string& why);

  const int rank_, size_;
  const std::string token_;
  nezha::Fd listen_;
  std::string where_;  // "address:port" of listen_, as published in the store
  std::vector<std::unique_ptr<Link>> links_;  // by rank; null for this rank

  std::mutex closeMu_;  // concurrent close() calls join once
  bool closed_ = false;
  std::mutex mu_;  // everything below
  bool closing_ = false;
  std::map<int64_t, std::deque<Message>> unexpected_;  // arrived, not yet asked for
  std::deque<Posted> posted_;                          // asked for, not yet arrived
  std::map<int, std::string> broken_;                  // peer -> why its link failed
};

}  // namespace nezha_torch
