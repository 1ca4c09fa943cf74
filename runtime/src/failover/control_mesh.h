// Control mesh: small authenticated messages between ranks, kept apart from the data path.
//
// Every rail carries one extra TCP connection per pair of ranks of the start-up set
// (transport/peer_set.h, which holds every neighbour below), opened and authenticated with the
// rail's data streams (TcpChannel::releaseControl). Each message can go out on every rail at
// once and the first copy to arrive counts, so the control plane works as long as any rail still
// joins two ranks. That is what makes failure agreement safe: run as an allreduce on one rail, a
// cut landing inside the round could complete it on one rank and not on another and end the job
// with "no rail left"; here, while some rail still joins every pair of ranks and no rank is late
// past the round's timeout, a round completes on every rank or fails on every rank.
//
// Agreement rounds (element-wise max of a vector of doubles) are a dissemination: ceil(log2 N)
// steps; at step k rank r sends its running max to (r + 2^k) mod N and folds in what
// (r - 2^k) mod N sent it. After the last step every rank's running max covers every rank (max
// is idempotent, so ranks covered twice when N is not a power of two do no harm): ceil(log2 N)
// messages per rank per round instead of the N - 1 of an all-to-all. A step goes out on one rail
// (the lowest open one); when the step it waits for has not come within a few milliseconds the
// rank sends its own step on every rail and asks its source to send again (RESEND) on every rail,
// and a RESEND for a step not reached yet makes that step go out on every rail when it is. Every
// rank's result depends on every rank's participation, so a round cannot complete anywhere
// without every rank in it; a rank whose round fails (its source closed every connection, was
// heard on no rail for the silence window, or the timeout passed, or the lengths differ) sends
// ABORT (round, its rank, why) to every peer it has a control connection to (transport/peer_set.h:
// O(log N) peers, not every pair), on every rail, and every rank floods the first copy it takes
// on to its own peers once (later copies stop) — O(log N) frames per rank, on failure only — so
// every rank learns the cause; a rank that receives it fails the round at once with that cause.
// What no protocol can prevent: a rank that dies or loses its last rail to one peer inside a round
// can leave the ranks that already had every step with the result and the rest with an error (as
// with an all-to-all); the failed ranks then close their mesh (failStop), so the others' next round
// fails at once. It fails with the first round's cause, not with "rank Q closed" for a failed rank
// Q that merely left: an ABORT for a round this rank already finished is kept (its ranks join no
// later round, so no later round can complete), and a rank that failed a round repeats its ABORT on
// every connection before closeAll() shuts them, so a peer reads why it left before it reads that
// it left.
//
// Other messages: "I lost this rail's link" notices (so peers drop the rail within milliseconds
// instead of waiting for their progress deadline), and "which operation are you in?" with its
// answer, asked only when a progress deadline expires or a round waits for a step, so a peer that
// has not reached the operation yet (busy computing, writing a checkpoint) is not taken for a
// dead rail. A reader thread polls all connections and answers questions; nothing here touches a
// data channel.
//
// Heartbeats (with a peer silence set): the same answer goes out unasked every fifth of the
// silence, on every rail, but only to the rank's dissemination neighbours, (r + 2^k) mod N and
// (r - 2^k) mod N for k < ceil(log2 N) (at most 2 ceil(log2 N) peers, the graph the rounds
// already use; it is symmetric, so a rank watches exactly the peers that beat to it): rails x
// O(log N) frames per beat instead of rails x (N - 1), so control traffic per rank grows as
// log N, not N. A peer's silence is judged only once it has been heard: until its first frame it
// is still starting (it connects every rail to every peer before it attaches its own mesh, which
// on a loaded host can take seconds after this rank attached), and only its connections closing
// or the round's timeout end a wait for it. Pending unread bytes from a peer count as hearing it,
// so a rank that was itself descheduled does not blame peers for frames it has not read yet.
// A rank that finds a
// neighbour heard on no rail for the silence floods a verdict ("rank P is unreachable",
// kMeshSilent) over the same graph: a rank takes the first copy and passes it on to its own
// neighbours once (later copies stop), so every rank knows within O(log N) hops at O(log N) frames
// per rank. A verdict holds only while the named rank has not been heard directly since it came and
// for at most two silences; while the rank stays silent its watchers flood it again every silence,
// and once it is heard again they stop, so a healed rank is silent nowhere after two silences at
// most (at once on the ranks that hear it). silentPeers() is what this rank saw itself (its
// neighbours) and what the verdicts say.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/socket.h"
#include "failover/agreement.h"
#include "failover/mesh_frame.h"

namespace nezha {

class ControlMesh : public Agreement {
 public:
  // onRailDown(peer, rail, generation): `peer` lost the link of `rail` (its connections of that
  // rail's `generation`). Called on the reader thread; must not block.
  using RailDownFn = std::function<void(int peer, int rail, uint64_t generation)>;

  // `silence`: a peer that answers no question for this long is unreachable (every rail
  // between us is down, or its host is gone); rounds waiting for it fail then. Both windows
  // start at the first frame heard from the peer, never before.
  // `peerSilence` > 0: every rank sends a heartbeat (HERE, its operation) to its neighbours on
  // every rail every peerSilence / 5, so a neighbour heard on no rail for peerSilence is
  // unreachable at once, without a question and a wait of its own (rounds fail on it
  // immediately), and every other rank learns it from the flooded verdict (silentPeers).
  ControlMesh(int rank, int worldSize, size_t rails, std::chrono::milliseconds silence,
              RailDownFn onRailDown, std::chrono::milliseconds peerSilence = {});
  ~ControlMesh() override;  // stops the reader and heartbeat threads, closes every connection
  ControlMesh(const ControlMesh&) = delete;
  ControlMesh& operator=(const ControlMesh&) = delete;

  // Installs the control connections of `rail` (indexed by peer; the own rank's entry is
  // invalid), replacing the ones the rail had.
  void attach(int rail, std::vector<Fd> conns) override;

  // Best effort, from any thread: tells every peer with a control connection (the start-up
  // set), on every rail, that this rank lost the link of `rail`. Others (peers met only by an
  // alltoall or a send) learn it from their connection closing or their progress deadline.
  void notifyRailDown(int rail, uint64_t generation) override;
  // This rank started operation `op` (an atomic store; peers learn it only when they ask).
  void setCurrentOp(uint64_t op) override { opsStarted_ = op + 1; }
  // True when some peer is alive but has not started operation `op` yet: it answered within
  // the silence window, and every peer that was asked answered. Asks only peers not already
  // known to be in `op` or later, and only those with a control connection (the start-up set).
  // A peer that sent this rank a step of a round this rank has not finished is waiting in that
  // round, for this rank: not busy elsewhere, so not behind (waiting on it would wait on
  // ourselves).
  bool peersBehind(uint64_t op) override;
  // Peers last heard (heartbeats, answers) in an operation before the one this rank started
  // last (setCurrentOp): as far as this rank knows, they have not started it. Asks nothing;
  // any thread (the torch backend names them when a collective outlives its group's timeout).
  std::vector<int> peersNotStarted() const;

  // Element-wise max of `values` over all ranks (a dissemination round: ceil(log2 N) steps);
  // all ranks call it in the same order with the same length. A peer that is alive may take up
  // to `timeout` (it may still be finishing its part of an operation); one that stops answering
  // fails the round after the silence window. Throws RailError(-1) when a step does not come
  // or its sender is unreachable, ConfigError when the lengths differ; when another rank's round
  // failed first, the same kind of error naming that rank and its cause.
  void maxReduce(std::vector<double>& values, std::chrono::milliseconds timeout) override;

  // What this rank's rounds cost, counted since construction. `messages`: steps sent, one per
  // step (ceil(log2 N) per round), however many rails carried a copy; `resentCopies`: steps
  // sent again on every rail (a chase after a lost or late copy, or a peer's RESEND);
  // `abortsSent`: ABORT frames addressed to peers (each on every rail), own and flooded on.
  struct AgreementStats {
    uint64_t rounds = 0, messages = 0, resentCopies = 0, abortsSent = 0;
  };
  AgreementStats agreementStats() const;
  int stepsPerRound() const { return steps_; }

  // What the heartbeats cost, counted since construction. `beats`: times the heartbeat thread
  // sent; `heartbeatsSent`: HERE frames it put out whole (rails x neighbours per beat while every
  // connection is open); `verdictsSent`: silent-peer verdict frames put out (own or passed on);
  // `verdictsTaken`: verdicts from peers this rank took as new (and passed on).
  struct HeartbeatStats {
    uint64_t beats = 0, heartbeatsSent = 0, verdictsSent = 0, verdictsTaken = 0;
  };
  HeartbeatStats heartbeatStats() const;
  // The peers this rank beats to and watches: (rank +- 2^k) mod N, k < ceil(log2 N), sorted,
  // without duplicates or the rank itself.
  const std::vector<int>& neighbours() const { return neighbours_; }
  static std::vector<int> neighboursOf(int rank, int worldSize);

  // Closes every connection: peers waiting on this rank learn at once that it is gone (used
  // when this rank's communicator fails for good). After a failed round, that round's ABORT goes
  // out first on every connection, so every peer learns the cause before the close.
  void closeAll() override;

  // Per rail: peers whose control connection on it is open (for /status).
  std::vector<int> openPeers() const;

  // With heartbeats: the neighbours heard on no rail for peerSilence, and the peers a verdict
  // names that this rank has not heard since it came (empty without heartbeats).
  std::vector<int> silentPeers() const override;
  std::chrono::milliseconds peerSilence() const override { return peerSilence_; }

 private:
  struct Conn;
  void loop();
  void beat();  // the heartbeat thread
  // The heartbeat thread, each beat: neighbours silent for peerSilence get a verdict flooded
  // (unless a fresh one is on its way already).
  void judgeNeighbours();
  // A verdict from `from`: taken and passed on, unless a flood on that peer left this rank less
  // than half a silence ago (a copy by another path, or this rank's own).
  void takeVerdict(int peer, uint32_t watcher, int from);
  // Sends the verdict on `peer` to every neighbour but `peer` and `except`, on every rail.
  void floodVerdict(int peer, uint32_t watcher, int except);
  // Sends an ABORT frame to every peer with an open connection but `except`; returns how many.
  uint64_t floodAbort(const std::string& frame, int except);
  // Sends `frame` on every open connection to the peers marked in `to`; frames put out whole.
  uint64_t sendToPeers(const std::string& frame, const std::vector<char>& to);
  // verdictMu_ held: `peer` is named by a verdict this rank holds, at `now`.
  bool verdictHolds(int peer, int64_t now) const;
  void readFrom(Conn& c);  // readMu_ held
  // Reads whatever arrives on open connections within `wait` (readMu_ held).
  void readFor(std::chrono::microseconds wait);
  // One dissemination step of a round, in the parts maxReduce takes.
  struct StepChase {
    int step = 0, source = 0, target = 0;
    Clock::time_point start, resendAt, nextAsk;
    std::chrono::milliseconds askEvery{1};
    bool everywhere = false;  // this step already went out on every rail
    bool askedAgain = false;  // RESEND already sent to the source
  };
  int targetOf(int step) const;  // (rank + 2^step) mod N
  int sourceOf(int step) const;  // (rank - 2^step) mod N
  // Sends step `step` of `round` to its target: one rail, or every rail when the target already
  // asked for it or no rail took it. Returns whether it went out on every rail.
  bool sendStep(uint64_t round, int step, const std::string& frame);
  // Waits for step `step` of `round` from its source; fails the round (throws) on an abort, an
  // unreachable source or the deadline.
  std::vector<double> awaitStep(uint64_t round, const std::string& frame, StepChase& chase,
                                Clock::time_point deadline, std::chrono::milliseconds timeout);
  void chaseStep(uint64_t round, const std::string& frame, StepChase& chase);
  // mu_ held: why the source of a step cannot answer (empty = keep waiting).
  std::string unreachable(int source, Clock::time_point stepStart) const;
  // Per peer: an open connection to it holds unread bytes (or its EOF).
  std::vector<char> inputWaiting(const std::vector<char>& peers) const;
  // Ends `round` here as failed: tells the peers (every one when this rank is `origin`, else
  // the targets of the steps after `step`, which wait for this rank) and throws.
  [[noreturn]] void failRound(uint64_t round, int step, uint32_t kind, uint32_t origin,
                              const std::string& why);
  void endRound(uint64_t round);  // mu_ held: drops the round's state; late copies are dropped
  void dispatch(const Conn& c, MeshFrame& frame);
  std::string misfit(const Conn& c, const MeshFrame& frame);
  // Sends `frame` on every open connection (to `onlyPeer` alone when >= 0). With mustReachAll,
  // waits briefly for room where no copy got out to a peer.
  void sendEverywhere(const std::string& frame, bool mustReachAll, int onlyPeer = -1);
  // Sends `frame` to `peer` on one open connection (the lowest rail); true if it went out whole.
  bool sendPrimary(const std::string& frame, int peer);
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
  const int steps_;  // ceil(log2 N): steps per agreement round
  const std::chrono::milliseconds silence_;
  const std::chrono::milliseconds peerSilence_;
  RailDownFn onRailDown_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Conn>> conns_;  // mu_; the reader and senders work on snapshots
  // Steps received, by round then step; rounds up to finished_ are done and late copies dropped.
  std::map<uint64_t, std::vector<std::unique_ptr<std::vector<double>>>> inbox_;  // mu_
  uint64_t finished_ = 0;                                                        // mu_
  // mu_: by peer, the latest round it sent this rank a step or an abort of (0 = none). A round
  // after finished_ is one that peer waits in for this rank (peersBehind).
  std::vector<uint64_t> peerRound_;
  std::map<std::pair<uint64_t, int>, std::string> sent_;  // mu_: (round, step), for RESEND
  std::set<std::pair<uint64_t, int>> wanted_;  // mu_: RESENDs for steps this rank had not reached
  struct Abort {
    uint32_t origin = 0, kind = 0;
    std::string why;
  };
  std::map<uint64_t, Abort> aborts_;  // mu_: rounds another rank failed, first word kept
  // mu_: the first ABORT of a round this rank had already finished, if one came: the ranks that
  // failed that round join no later one, so every later round fails with its cause.
  Abort abortAfterFinish_;
  bool abortedAfterFinish_ = false;
  std::string failedWith_;  // mu_: the ABORT frame of the round this rank failed, for closeAll
  uint64_t round_ = 0;      // the caller's thread only
  std::atomic<uint64_t> opsStarted_{0};                                 // this rank
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> peerOpsStarted_;  // as last heard
  // Steady ns of the last frame from the peer; 0 = never heard (still starting: not judged).
  std::vector<std::unique_ptr<std::atomic<int64_t>>> lastHeard_;
  std::atomic<uint64_t> rounds_{0}, messages_{0}, resentCopies_{0}, abortsSent_{0};

  std::vector<int> neighbours_;  // heartbeat and verdict graph (dissemination neighbours)
  std::vector<char> watched_;    // by peer: a neighbour (the mask sendToPeers takes)
  mutable std::mutex verdictMu_;
  // By peer, steady ns (0 = never): when this rank last took or made a verdict on it (the
  // verdict holds from then), and when a flood on it last went out from here (floods on one
  // peer leave a rank at most once per half silence, so copies arriving by other paths stop).
  std::vector<int64_t> verdictAt_, floodedAt_;  // verdictMu_
  std::vector<char> attachedOnce_;  // verdictMu_: a connection to the peer was installed
  std::atomic<uint64_t> verdictsSent_{0}, verdictsTaken_{0};
  uint64_t beats_ = 0, heartbeatsSent_ = 0;  // beatMu_: one beat's frames counted together

  std::mutex sendMu_;  // one frame at a time per connection
  // Held while reading connections. A round's caller holds it for the whole round and reads
  // the sockets itself (one thread hop less per round than waiting for the reader thread,
  // which matters for small operations); the reader thread takes it around each read.
  std::mutex readMu_;
  Fd wakeRead_, wakeWrite_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex beatMu_;
  std::condition_variable beatCv_;  // wakes the heartbeat thread to stop
  std::thread beat_;
};

}  // namespace nezha
