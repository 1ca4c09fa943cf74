// How a rail reaches every peer in connect() (transport.h), the same for every transport: each
// pair of ranks opens `conns` TCP connections on the rail, each authenticated with the job token
// and a purpose the transport names (session, rail, direction, stream: bootstrap/auth.h binds it
// into both proofs). Lower ranks are dialled, higher ones accepted: rank r's dials complete
// once every lower rank reached its accept phase, which by induction always happens (rank 0
// only accepts). Anyone else who connects to the rail's port (a port scanner, a stray HTTP
// client, a connection of an older session) costs only its own handshake deadline
// (bootstrap/acceptor.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/socket.h"
#include "bootstrap/rendezvous.h"
#include "nezha/nezha.hpp"

namespace nezha {

class PeerMesh {
 public:
  // Pending handshakes one source address may hold on a rail's listener; beyond it the source's
  // oldest idle one is evicted, so a flood from one host cannot push out a genuine peer's
  // connection, nor a rebuilt rail's (docs/security.md "Hostile input"). Genuine dialers hold
  // one pending handshake per rank (each dials its streams one after another); ranks of one node
  // share the source address, so the cap sits far above the ranks a node runs.
  static constexpr size_t kMaxPendingPerSource = 64;

  // Who this rank is on which rail, and its address there (dials come from it).
  PeerMesh(const Options& o, int railIndex, const std::string& address);

  // The purpose of connection `stream` from rank `from` to rank `to`.
  using Purpose = std::function<std::string(int from, int to, int stream)>;

  // Opens `conns` connections to every peer, tuned with `tuning`, accepting on `listenFd` (not
  // owned). Returns them as [peer][stream] (empty for this rank), blocking, authenticated.
  // Throws PeerConnectError naming the peer it could not reach (when accepting: the first
  // higher rank still missing), AuthError when a peer fails the token proof. `rejected` counts
  // the strangers turned away.
  std::vector<std::vector<Fd>> connect(const JobTable& job, Deadline deadline, int listenFd,
                                       const SocketTuning& tuning, int conns,
                                       const Purpose& purpose, uint64_t& rejected) const;

 private:
  RailSpec spec_;
  int rail_, rank_, size_;
  std::string address_, token_;
  std::chrono::milliseconds ioTimeout_;  // also caps a stranger's handshake deadline
};

}  // namespace nezha
