// Control mesh: small authenticated messages between ranks, kept apart from the data path.
//
// Every rail carries one extra TCP connection per pair of ranks, opened and authenticated with
// the rail's data streams (TcpChannel::releaseControl). Each message goes out on every rail at
// once and the first copy to arrive counts, so the control plane works as long as any rail still
// joins two ranks. That is what makes failure agreement safe: run as an allreduce on one rail, a
// cut landing inside the round could complete it on one rank and not on another and end the job
// with "no rail left"; here a round completes on every rank or times out on every rank.
//
// Messages: agreement rounds (element-wise max of a vector of doubles), "I lost this rail's link"
// notices (so peers drop the rail within milliseconds instead of waiting for their progress
// deadline), and "which operation are you in?" with its answer, asked only when a progress
// deadline expires, so a peer that has not reached the operation yet (busy computing, writing a
// checkpoint) is not taken for a dead rail. With a peer silence set, the same answer goes out
// unasked as a heartbeat, so a peer heard on no rail is known unreachable without a question.
// A reader thread polls all connections and answers questions; nothing here touches a data
// channel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "failover/mesh_frame.h"
#include "util/socket.h"

namespace nezha {

class ControlMesh {
 public:
  // onRailDown(peer, rail, generation): `peer` lost the link of `rail` (its connections of that
  // rail's `generation`). Called on the reader thread; must not block.
  using RailDownFn = std::function<void(int peer, int rail, uint64_t generation)>;

  // `silence`: a peer that answers no question for this long is unreachable (every rail
  // between us is down, or its host is gone); rounds waiting for it fail then.
  // `peerSilence` > 0: every rank sends a heartbeat (HERE, its operation) on every connection
  // every peerSilence / 5, so a peer heard on no rail for peerSilence is unreachable at once,
  // without a question and a wait of its own (silentPeers; rounds fail on it immediately).
  ControlMesh(int rank, int worldSize, size_t rails, std::chrono::milliseconds silence,
              RailDownFn onRailDown, std::chrono::milliseconds peerSilence = {});
  ~ControlMesh();  // stops the reader and heartbeat threads, closes every connection
  ControlMesh(const ControlMesh&) = delete;
  ControlMesh& operator=(const ControlMesh&) = delete;

  // Installs the control connections of `rail` (indexed by peer; the own rank's entry is
  // invalid), replacing the ones the rail had.
  void attach(int rail, std::vector<Fd> conns);

  // Best effort, from any thread: tells every peer, on every rail, that this rank lost the link
  // of `rail`.
  void notifyRailDown(int rail, uint64_t generation);
  // This rank started operation `op` (an atomic store; peers learn it only when they ask).
  void setCurrentOp(uint64_t op) { opsStarted_ = op + 1; }
  // True when some peer is alive but has not started operation `op` yet: it answered within
  // the silence window, and every peer that was asked answered. Asks only peers not already
  // known to be in `op` or later.
  bool peersBehind(uint64_t op);

  // Element-wise max of `values` over all ranks; all ranks call it in the same order with the
  // same length. A peer that is alive may take up to `timeout` (it may still be finishing its
  // part of an operation); one that stops answering fails the round after the silence window.
  // Throws RailError(-1) when a peer's values do not come or it is unreachable, ConfigError
  // when the lengths differ.
  void maxReduce(std::vector<double>& values, std::chrono::milliseconds timeout);

  // Closes every connection: peers waiting on this rank learn at once that it is gone (used
  // when this rank's communicator fails for good).
  void closeAll();

  // Per rail: peers whose control connection on it is open (for /status).
  std::vector<int> openPeers() const;

  // With heartbeats: the peers heard on no rail for peerSilence (empty without heartbeats).
  std::vector<int> silentPeers() const;
  std::chrono::milliseconds peerSilence() const { return peerSilence_; }

 private:
  struct Conn;
  void loop();
  void beat();             // the heartbeat thread
  void readFrom(Conn& c);  // readMu_ held
  // Reads whatever arrives on open connections within `wait` (readMu_ held).
  void readFor(std::chrono::microseconds wait);
  // One agreement round, in the steps maxReduce takes.
  struct RoundState {
    std::vector<int> missingPeers;  // have not sent this round yet
    std::string missing;            // the same, as text
    std::string unreachable;        // why a missing peer cannot answer; empty = keep waiting
  };
  struct RoundChase {
    Clock::time_point start, resendAt, nextAsk;
    std::chrono::milliseconds askEvery{1};
    bool everywhere = false;  // the round already went out on every rail
  };
  RoundState inspectRound(uint64_t round, Clock::time_point start);
  void finishRound(uint64_t round, const RoundState& st, std::chrono::milliseconds timeout,
                   std::vector<double>& values);
  void chaseMissing(uint64_t round, const std::string& frame, const std::vector<int>& missingPeers,
                    RoundChase& chase);
  void dispatch(const Conn& c, MeshFrame& frame);
  // Sends `frame` on every open connection (to `onlyPeer` alone when >= 0). With mustReachAll,
  // waits briefly for room where no copy got out to a peer.
  void sendEverywhere(const std::string& frame, bool mustReachAll, int onlyPeer = -1);
  // Sends `frame` to each peer on one open connection (the lowest rail); true if it went out
  // whole to every peer.
  bool sendPrimary(const std::string& frame);
  // Writes `frame` whole on `c` (sendMu_ held). A socket full at the start of the frame is
  // skipped (false; the connection stays usable) unless waitForRoom; once part of the frame
  // went out it is finished within a short budget or the connection is closed.
  bool writeFrame(Conn& c, const std::string& frame, bool waitForRoom);
  void wake();
  bool peerReachable(int peer) const;  // mu_ held
  void ask(const std::vector<int>& peers, uint64_t op);
  int64_t nowNs() const;

  const int rank_, size_;
  const size_t rails_;
  const std::chrono::milliseconds silence_;
  const std::chrono::milliseconds peerSilence_;
  RailDownFn onRailDown_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Conn>> conns_;  // mu_; the reader and senders work on snapshots
  // Agreement values by round, per peer; rounds up to finished_ are done and late copies dropped.
  std::map<uint64_t, std::vector<std::unique_ptr<std::vector<double>>>> inbox_;  // mu_
  uint64_t finished_ = 0;                                                        // mu_
  std::map<uint64_t, std::string> sent_;  // mu_: this rank's last rounds, for kResend
  uint64_t round_ = 0;                    // the caller's thread only
  std::atomic<uint64_t> opsStarted_{0};   // this rank
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> peerOpsStarted_;  // as last heard
  std::vector<std::unique_ptr<std::atomic<int64_t>>> lastHeard_;        // steady ns, any frame

  std::mutex sendMu_;  // one frame at a time per connection
  // Held while reading connections. A round's caller holds it for the whole round and reads
  // the sockets itself (one thread hop less per round than waiting for the reader thread,
  // which matters for small operations); the reader thread takes it around each read.
  std::mutex readMu_;
  Fd wakeRead_, wakeWrite_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex beatMu_;
  std::condition_variable beatCv_;  // wakes the heartbeat thread to stop
  std::thread beat_;
};

}  // namespace nezha
