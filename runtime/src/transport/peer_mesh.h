// How a rail reaches its peers, the same for every transport that bootstraps over TCP: each pair
// of ranks opens `conns` TCP connections on the rail, each authenticated with the job token and
// a purpose the transport names (session, rail, direction, stream: bootstrap/auth.h binds it
// into both proofs). The higher rank of a pair dials, the lower one accepts, at start-up and on
// demand alike: rank r's dials complete once every lower rank it dials reached its accept phase,
// which by induction always happens (rank 0 only accepts). Anyone else who connects to the
// rail's port (a port scanner, a stray HTTP client, a connection of an older session) costs only
// its own handshake deadline (bootstrap/acceptor.h).
//
// Which pairs: a transport asks for the peers it needs (TcpChannel: transport/peer_set.h's set
// at start-up, any other peer when an exchange first names it; verbs: every peer). The mesh
// keeps one acceptor for the life of the rail, so a peer that dials before this rank needs the
// connection (it reached an alltoall first, or is past start-up while this rank still accepts
// its start-up set) is authenticated at once and its connection kept until it is asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/socket.h"
#include "bootstrap/rendezvous.h"
#include "nezha/nezha.hpp"

namespace nezha {

class HandshakeAcceptor;

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
  ~PeerMesh();

  // The purpose of connection `stream` from rank `from` to rank `to`.
  using Purpose = std::function<std::string(int from, int to, int stream)>;

  // Binds the mesh to one generation of the rail: the job table (copied), the listening socket
  // (not owned; it must stay open while connections may still be asked for), the tuning of
  // dialled sockets, the most connections one pair opens, and how each is named.
  void open(const JobTable& job, int listenFd, const SocketTuning& tuning, int maxConns,
            Purpose purpose);

  // Opens `conns` (<= maxConns) connections to each of `peers` (without this rank), blocking,
  // authenticated: dials the lower ones, accepts the higher ones, takes the ones that came
  // early. Returns them as [peer][stream] (empty for peers not asked). Throws PeerConnectError
  // naming the peer it could not reach (when accepting: the first higher one still missing),
  // AuthError when a peer fails the token proof.
  std::vector<std::vector<Fd>> connect(const std::vector<int>& peers, int conns, Deadline deadline);

  // open() and connect() to every peer at once (verbs bootstraps a full mesh); `rejected`
  // counts the strangers turned away.
  std::vector<std::vector<Fd>> connect(const JobTable& job, Deadline deadline, int listenFd,
                                       const SocketTuning& tuning, int conns,
                                       const Purpose& purpose, uint64_t& rejected);

  // From any thread: the dial in progress, if any, fails at once and later dials fail before
  // they start (the rail was aborted; an accept wait ends when its owner shuts the listener).
  void interrupt();

  // Connections turned away so far (strangers, wrong token, purposes of no peer of this rail).
  uint64_t rejected() const;
  // Connections that arrived before they were asked for and wait in the mesh.
  size_t kept() const { return kept_.size(); }

 private:
  Fd dial(int peer, int stream, Deadline deadline);
  // Accepts until `want` ([peer][stream], only higher peers) is filled.
  void accept(std::vector<std::vector<Fd>>& want, Deadline deadline);

  RailSpec spec_;
  int rail_, rank_, size_;
  std::string address_, token_;
  std::chrono::milliseconds ioTimeout_;  // also caps a stranger's handshake deadline
  // Set by open():
  JobTable job_;
  SocketTuning tuning_;
  int maxConns_ = 0;
  Purpose purpose_;
  std::unique_ptr<HandshakeAcceptor> acceptor_;
  std::map<std::string, std::pair<int, int>> dialledBy_;  // purpose -> (higher peer, stream)
  std::map<std::pair<int, int>, Fd> kept_;                // (peer, stream) -> arrived early
  std::vector<std::vector<char>> handedOut_;              // [peer][stream] given to the caller
  std::mutex dialMu_;
  int dialling_ = -1;         // dialMu_: the socket of the handshake under way (not owned)
  bool interrupted_ = false;  // dialMu_
};

}  // namespace nezha
