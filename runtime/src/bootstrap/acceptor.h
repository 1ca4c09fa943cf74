// Accepting authenticated connections on a listening socket that anyone on the network can reach
// (rendezvous, every rail's data port, re-admission): all pending handshakes progress together
// on non-blocking sockets, each under its own short deadline, so a connection that closes at
// once, speaks HTTP, sends random bytes or connects and stays idle costs the job nothing but
// that connection's own deadline — it never aborts or stalls the setup of the real peers.
// Rejected connections are counted by reason; the first of each reason is logged once.
//
// Floods of idle sockets (docs/security.md "Hostile input"): when a limit is reached the oldest
// connection that has sent nothing is evicted to make room, so a newcomer (a real rank arriving
// after the flood) is not the one turned away while idle sockets hold the table. A listener
// whose clients retry a connection closed before authentication (the rendezvous,
// bootstrap/rendezvous.cc) also drops a connection that sends nothing within `helloDeadline` (a
// real peer sends its hello at once) and caps each source at `maxPendingPerSource`; rail
// listeners, whose clients do not retry, leave both off.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "bootstrap/auth.h"

namespace nezha {

struct AcceptedPeer {
  Fd fd;                   // blocking, authenticated
  std::string purpose;     // what the client claimed and proved (bound into its MAC)
  std::string firstFrame;  // with Options::firstFrameMax > 0: the frame that followed
};

class HandshakeAcceptor {
 public:
  struct Options {
    std::string listener;                           // for logs: "rendezvous", "rail r1"
    std::chrono::milliseconds perConnection{5000};  // a handshake's own deadline
    std::chrono::milliseconds helloDeadline{0};     // > 0: nothing received by then: dropped
    size_t firstFrameMax = 0;                       // > 0: read one frame after the proof
    size_t maxPending = 1024;                       // in all (idle ones evicted first)
    size_t maxPendingPerSource = 0;                 // > 0: per source IP (idle ones evicted first)
    ServerHandshake::PurposeCheck serves;           // purposes served; empty = any
  };
  // `listenFd` and `token` are not owned and must outlive the acceptor.
  HandshakeAcceptor(int listenFd, const std::string& token, Options options);
  ~HandshakeAcceptor();
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  // Serves handshakes until one completes and returns it. Throws RailError(rail, "<what>: timed
  // out ...") at `deadline`, and at once when the listening socket is shut down (how another
  // thread stops the wait). Handshakes still pending stay pending for the next call.
  AcceptedPeer next(Deadline deadline, int rail, const std::string& what);

  // The same service without blocking, for a caller that folds the acceptor into its own poll
  // loop (the NCCL plugin's rail listeners run on NCCL's proxy thread, which must never wait):
  // accepts what is queued, moves every pending handshake as far as its socket allows, drops
  // expired ones and returns the handshakes that completed. Their sockets stay non-blocking.
  std::vector<AcceptedPeer> poll();
  // The sockets worth watching for poll() above: the listener and each pending handshake.
  void appendPollFds(std::vector<int>& fds) const;
  // The earliest moment a pending handshake expires (poll() must run by then); max() if none.
  Deadline nextExpiry() const;

  // Tells the acceptor an authenticated peer was turned away by the caller (e.g. a connection of
  // an older session), so it is counted like the others.
  void reject(const std::string& reason);

  // Rejected connections by reason ("closed", "idle", "garbage", "wrong token", "wrong purpose",
  // "evicted", "too many", "unexpected"), and in total.
  const std::map<std::string, uint64_t>& rejected() const { return rejected_; }
  uint64_t rejectedTotal() const;

 private:
  struct Pending;
  void acceptReady();
  // Makes room for a connection from `source`: evicts the oldest idle pending connection (of
  // that source when it is at its cap); false when every candidate has already sent bytes.
  bool makeRoom(const std::string& source);
  // Moves one handshake as far as its socket allows; returns true when it is finished (done or
  // rejected).
  bool progress(Pending& p);
  // Moves pending_[i] on; a finished handshake leaves pending_ (a null slot) and, when it
  // succeeded, joins ready_.
  void step(size_t i);
  void dropExpired();
  void count(const std::string& reason, const std::string& detail);

  int listen_;
  const std::string& token_;
  Options options_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::vector<AcceptedPeer> ready_;
  std::map<std::string, uint64_t> rejected_;
};

}  // namespace nezha
