// The failover engine: runs an operation's slices on their rails and finishes it exactly when a
// rail breaks, brings a healed rail back, and drains/restores rails on request.
//
// It owns the rails' data path at run time — one channel and one worker thread per rail — and
// every piece of failover state: which rails are down here or on a peer, the per-operation
// agreement's bookkeeping, the kept round-free operation, rebuilds in flight, hold-downs, drain
// requests. Whoever drives it (the communicator today; any component that stripes messages over
// rails) gives it:
//   - the rails (RailInfo, borrowed: the engine updates latency/bandwidth on re-admission),
//   - the Options that hold the failover knobs (borrowed),
//   - Metrics to record failovers, re-admissions, drains and replays in (borrowed),
//   - a transport factory for rebuilding a rail (re-admission step 2),
//   - at start-up, in this order: the connected channels, the Agreement (control mesh), the job
//     table and algorithm options (rebuilt rails' sessions and probe), the Scheduler (split,
//     predictions, which rails are alive: the engine keeps it in step with its own state).
// and calls beginOp() before each operation, then runOp()/runUnit().
//
// The design, in order (failover_engine.cc, readmission.cc, drain.cc):
//   - Every operation's slices run concurrently, each on its rail's thread, under a progress
//     deadline from the scheduler's prediction, watched by the RailWatchdog (black holes, gray
//     rails) and by the peers' heartbeats (silent peers).
//   - With Options::failover each operation ends with a round on the Agreement: per rail
//     [failed | not ready to rebuild | drain | restore | -chunks done | rebuild failed | rebuild
//     not done]. A rail flagged by any rank leaves the split on every rank at the same
//     operation; its chunks not done everywhere are redone on the survivors from the preserved
//     inputs; the rest stands. A failover record names the ranks that saw the failure.
//   - Small cold operations may skip their round (round-free); the next round confirms them.
//   - A failed rail is rebuilt in the background once its link is up on every rank past its
//     hold-down, probed end to end, and re-enters with the share its measured bandwidth earns.
//   - Drain/restore requests from the control endpoint are applied at an agreed round.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/rail_worker.h"
#include "bootstrap/rendezvous.h"
#include "collectives/collectives.h"
#include "failover/agreement.h"
#include "failover/watchdog.h"
#include "nezha/nezha.hpp"
#include "schedule/scheduler.h"
#include "transport/transport.h"

namespace nezha {

class FailoverEngine {
 public:
  // One slice's work on its rail. Must be re-runnable: it reads only preserved inputs.
  using SliceFn = std::function<void(Channel&, Scratch&, const Slice&)>;
  // Builds the slice function of an operation from its (possibly copied) input and its output.
  using MakeSliceFn = std::function<SliceFn(const char* in, char* out)>;
  // A fresh transport for `rail`, listening already (re-admission rebuilds the rail with it).
  using TransportFactory = std::function<std::unique_ptr<Transport>(int rail)>;

  struct Outcome {
    std::vector<double> secs;  // per rail, summed over attempts
    std::vector<Slice> done;   // slices that completed on every rank
    bool replayed = false;
    // A peer was still in the previous (round-free) operation and failed it: this rank redid
    // that one with it, and the caller must run its own operation again from a fresh plan.
    bool restart = false;
  };

  // `options`, `rails` and `metrics` are borrowed and must outlive the engine. Starts one
  // worker thread per rail.
  FailoverEngine(const Options& options, std::vector<RailInfo>& rails, Metrics& metrics,
                 TransportFactory makeTransport);
  ~FailoverEngine();
  FailoverEngine(const FailoverEngine&) = delete;
  FailoverEngine& operator=(const FailoverEngine&) = delete;

  // ---- start-up (the owner's thread, in this order) -----------------------------------------
  // The thread of `rail` (connects run on it, each rail concurrently).
  RailWorker& worker(int rail) { return *workers_[rail]; }
  // The connected channels, index = rail; `usable[r]` false: the rail starts out of the split.
  void adoptChannels(std::vector<std::unique_ptr<Channel>> channels,
                     const std::vector<bool>& usable);
  // Borrowed; null (or never set) with one rank.
  void setAgreement(Agreement* agreement) { agreement_ = agreement; }
  // What a rebuilt rail needs: the job table (sessions, peers' addresses) and algorithm options.
  void setJob(const JobTable& job, const AlgoOptions& algo);
  // Borrowed; set once the init probe has measured the rails.
  void setScheduler(Scheduler* scheduler) { sched_ = scheduler; }
  // A rail left out at start, recorded as a failover at operation 0 (same record on every rank).
  void recordDownAtStart(int rail, const std::string& why, const std::vector<int>& ranks,
                         const std::string& reason);

  // ---- operations (the owner's thread) ------------------------------------------------------
  // Operation `op` starts now (failover records name it; the agreement learns it).
  void beginOp(uint64_t op);
  // Throws when an earlier failure made the engine unusable.
  void checkUsable() const;
  // The caller's signature of the operation begun last (kOpSignatureBytes, op_header.h; ""
  // = unsigned): every slice of it, replays and a kept redo included, runs on a SignedChannel
  // (signed_channel.h), and a disagreement ends the operation with MismatchError on every rank
  // that compared, leaving the engine unusable like a fatal rail failure.
  void setOpSignature(std::string signature) { signature_ = std::move(signature); }
  // Plans (again after a redo of a kept operation) and runs one operation; `in`/`inBytes` are
  // what a redo needs kept, `outBytes` the size of its output; `copyIn`: the operation would
  // overwrite inputs a replay needs, so it runs from a copy. `twoWay`: every rank sends to and
  // receives from its peer in every slice (an exchange of operation headers, op_header.h), so
  // no rank can finish before its peer started: such an operation may skip its round like a
  // small allreduce whatever its kind.
  Outcome runOp(OpKind op, const std::function<Plan()>& makePlan, const char* in, size_t inBytes,
                char* out, size_t outBytes, bool copyIn, const MakeSliceFn& make, Plan& plan,
                bool twoWay = false);
  // A small control task (barrier) as a one-unit operation on the cold rail, with the same
  // failover as data slices. `fn` must be re-runnable.
  void runUnit(const std::function<void(Channel&, Scratch&)>& fn);
  // Runs fn on `rail`'s thread outside any operation (start-up); a failure is fatal.
  void runOn(int rail, const std::function<void(Channel&, Scratch&)>& fn);
  // Element-wise max over all ranks; a peer that cannot be reached is fatal. `timeout` bounds
  // the wait for a peer that is alive but slow.
  void agree(std::vector<double>& v, std::chrono::milliseconds timeout);
  // A round now, before this operation moves any data, when a round-free operation is kept.
  void confirmKept();

  // ---- events (any thread) ------------------------------------------------------------------
  void onLinkDown(size_t rail);
  void onLinkUp(size_t rail);
  // `peer` lost the link of `rail` (its connections of `generation`).
  void onPeerRailDown(int peer, int rail, uint64_t generation);
  // The transport reported its rail unusable out of band (Transport::HealthListener).
  void onTransportFault(size_t rail, const std::string& why);
  // Fails the rail's exchange in flight now (tests; an operator's cut).
  void abortRail(int rail);
  // Another engine of this process lost `rail` to silence (the NCCL plugin runs one engine per
  // connection, and its connections share every rail's paths): for kSuspectFor a slice on the
  // rail that moves nothing for kSuspectQuiet while its peer is in the operation fails then,
  // not at its own progress deadline. In a ring each connection otherwise met a black hole
  // after the one before it had, one progress deadline each (docs/nccl.md "Benchmark").
  void suspectRail(size_t rail);
  // Called on the engine's thread when a rail leaves for silence (the watchdog, this rank's or
  // its peer's progress deadline): what suspectRail() is told elsewhere.
  void setSilenceListener(std::function<void(int rail)> fn) { silenceListener_ = std::move(fn); }
  static constexpr std::chrono::milliseconds kSuspectFor{2000};
  static constexpr std::chrono::milliseconds kSuspectQuiet{150};
  // Drain / restore asked on this rank (the control endpoint); applied at the next round.
  enum class Request : int { kNone = 0, kDrain = 1, kRestore = 2 };
  void request(int rail, Request what) { controlRequest_[rail]->store(static_cast<int>(what)); }

  // ---- state, for reports (the owner's thread, between operations) --------------------------
  size_t railCount() const { return rails_.size(); }
  Channel& channel(int rail) { return *channels_[rail]; }
  bool hasChannels() const { return !channels_.empty(); }
  // healthy | drained | probing | failed
  std::string railState(size_t rail) const;
  // The rail's bandwidth was measured by a re-admission probe.
  bool reprobed(size_t rail) const { return reprobed_[rail]; }
  // How long the rail waits before its next re-admission attempt (NEZHA_READMIT_HOLDDOWN_MS,
  // doubled per re-admission).
  std::chrono::milliseconds holdDown(size_t rail) const { return holdDown_[rail]; }
  // Failed for good (every rail gone, ranks disagreed): the first fatal error, else "".
  const std::string& failure() const { return failure_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One pass of runSlices over the slices still to do, and what it found per rail.
  struct Attempt {
    std::vector<double> failed;          // 1 = failed (here, then agreed over all ranks)
    std::vector<std::string> errors;     // first error per rail (+ a failed round's, appended)
    std::vector<size_t> leadingDone;     // chunks done here before the rail's first failure
    std::vector<size_t> doneEverywhere;  // after the round: leading chunks done on every rank
    std::vector<double> sawHere;         // 1 = this rank saw the rail fail itself
    std::vector<int> ready;              // after the round: failed rails ready to rebuild
    std::vector<double> rebuildFailed, rebuildNotDone;  // after the round, per rail (max)
    std::chrono::milliseconds longest{0};  // the longest progress deadline of the attempt
    uint64_t minOp = 0;                    // after the round: the oldest operation any rank is in
    // A signed slice found the ranks out of step here (signed_channel.h): its rails count as
    // failed, so this rank joins the round its peers reach through the failures it caused.
    std::exception_ptr mismatch;
  };

  // The last operation that skipped its round, with what a redo needs: the ranks that finished
  // it redo it with a peer that failed it (found out in the next round), writing into `out`.
  struct Kept {
    uint64_t op = 0;
    Plan plan;
    std::vector<char> in, out;
    size_t outBytes = 0;
    MakeSliceFn make;  // captures nothing of the caller's stack
  };

  // A rail being rebuilt in the background (connect + probe on the rail's own thread). Shared
  // with that task, which may outlive a rebuild the job gave up on.
  struct Rebuild {
    // kSlow: the bandwidth probe ran past the time that already puts the rail below the floor.
    enum State : int { kRunning = 0, kOk = 1, kFailed = 2, kSlow = 3 };
    uint64_t gen = 0;
    std::unique_ptr<Transport> transport;
    TaskHandle task;
    std::atomic<int> state{kRunning};
    std::string error;             // written by the task before state
    double latency = 0, bulk = 0;  // probe seconds, written by the task before state
    size_t probeBytes = 0;
    // Bytes/s a rail needs to earn NEZHA_SLOW_FLOOR next to the others (agreed values, so the
    // same on every rank); 0 = no floor applies. The probe gives up once it cannot reach it.
    double floorBandwidth = 0;
    std::atomic<bool> tooSlow{false};  // set by the probe's watch when it gives up as slow
    Clock::time_point started;
  };

  // failover_engine.cc
  [[noreturn]] void failStop(const RailError& e);
  Outcome runSlices(const Plan& plan, const SliceFn& fn, std::unique_ptr<Kept>* next = nullptr);
  Attempt runAttempt(const Plan& plan, const std::vector<Slice>& todo, const SliceFn& fn,
                     Outcome& out);
  std::chrono::milliseconds progressDeadline(int rail, size_t bytes) const;
  std::string silentPeerVerdict(Clock::time_point moved, Clock::time_point start) const;
  std::string suspectedRailVerdict(int rail, Clock::time_point moved, Clock::time_point start,
                                   uint64_t op) const;
  void flagKnownDownRails(Attempt& at);
  void agreeOnAttempt(Attempt& at, bool patient);
  // The signed part of the round (signed operations only): per rank [saw a mismatch, operation
  // + 1, the signature as 8 32-bit words], each rank filling its own slot.
  void putSignature(std::vector<double>& round, const Attempt& at) const;
  void checkSignatures(const std::vector<double>& round, size_t at);
  bool finish(const Plan& plan, const SliceFn& fn, std::vector<Slice> todo, Attempt at,
              Outcome& out, bool patient, bool agreedAlready = false,
              std::vector<Slice> later = {});
  std::vector<Slice> laterWaves(std::vector<Slice>& todo) const;
  void retireRails(const std::vector<int>& leaving, Attempt& at);
  void shutRail(int rail);
  void recordFailover(int rail, const std::string& localError, const std::vector<int>& ranks,
                      const std::string& reason);
  std::string failoverReason(int rail, const std::string& localError) const;
  bool ownDetectorFired(int rail) const;
  [[noreturn]] void allRailsDown(const std::vector<std::string>& errors);
  std::vector<int> ownLinksDown() const;
  std::string railError(int rail, const std::string& what);
  bool roundFree(OpKind op, const Plan& plan, bool twoWay) const;
  bool continuesKept(const Plan& plan) const;
  uint64_t eventOpNumber() const;
  MakeSliceFn signedMake(const MakeSliceFn& make) const;
  FailoverEvent railEvent(int rail, const std::string& reason) const;

  // readmission.cc
  void moveReadmissions(const Attempt& agreed);
  bool readyLocally(int rail) const;
  bool rebuilding(int rail) const { return rebuilds_[rail] != nullptr; }
  void startRebuilds(const std::vector<int>& railsReady);
  void settleQuickRebuilds();
  bool carrierBackSinceFailure(size_t rail) const;
  void launchRebuild(int rail, const std::shared_ptr<Rebuild>& rb, JobTable jt);
  double floorBandwidth(int rail) const;
  void rebuildFlags(size_t rail, double& failedHere, double& notDone) const;
  void advanceRebuilds(const std::vector<double>& failed, const std::vector<double>& notDone);
  void rejectRebuild(int rail, const std::shared_ptr<Rebuild>& rb, const std::string& reason,
                     const std::string& why, double bandwidth);
  void reapAbandoned();
  void installRail(int rail, const std::shared_ptr<Rebuild>& rb, double latency, double bandwidth);

  // drain.cc
  void applyControl(const std::vector<double>& agreed);

  // Borrowed from the owner.
  const Options& o_;
  std::vector<RailInfo>& rails_;
  Metrics& metrics_;
  TransportFactory makeTransport_;
  Agreement* agreement_ = nullptr;
  Scheduler* sched_ = nullptr;
  JobTable job_;
  AlgoOptions algo_;

  // The data path, one entry per rail.
  std::vector<std::unique_ptr<Channel>> channels_;  // empty with one rank
  std::vector<Scratch> scratch_;                    // touched only by the rail's worker
  mutable std::mutex channelMu_;  // channels_[r] swap vs. abort from the watcher / mesh threads

  // Operation state.
  uint64_t currentOp_ = 0;
  int64_t eventOp_ = -1;  // while redoing a kept operation: the operation events name
  Clock::time_point opStart_;
  std::string failure_;  // the first fatal error; afterwards every operation is refused
  int failureRail_ = -1;
  std::unique_ptr<Kept> kept_;
  std::string signature_;  // of currentOp_; "" = unsigned (setOpSignature)

  // Failure state per rail.
  std::vector<bool> localDown_;  // rails this rank has shut (failed here or agreed dead)
  // Set from other threads: the link watcher (this rank lost carrier) and the agreement's
  // reader (peer + 1 of the rank that reported losing it; 0 = none).
  std::vector<std::unique_ptr<std::atomic<bool>>> linkDown_;
  std::vector<std::unique_ptr<std::atomic<int>>> reportedDownBy_;
  // suspectRail(): when another engine of this process found the rail silent (steady ns; 0 =
  // never). Written by any thread, read by the progress watch on the rail's thread.
  std::vector<std::unique_ptr<std::atomic<int64_t>>> suspectedAt_;
  std::function<void(int rail)> silenceListener_;
  std::vector<std::string> faultWhy_;  // the transport's last report; channelMu_
  std::unique_ptr<RailWatchdog> watchdog_;

  // Re-admission state per rail. The generation names the rail's connections, so bytes (and
  // rail-down notices) of an older generation are never taken for the current one.
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> generation_;
  std::vector<Clock::time_point> failedAt_;
  std::vector<std::chrono::milliseconds> holdDown_;
  std::vector<std::unique_ptr<std::atomic<int64_t>>> linkUpAt_;  // steady ns; watcher thread
  std::vector<std::shared_ptr<Rebuild>> rebuilds_;               // null = none; owner's thread
  std::vector<std::shared_ptr<Rebuild>> abandoned_;              // given up, task still running
  std::vector<bool> reprobed_;
  // The rail's last rebuild was rejected (it is being retried while still faulty): the boundary
  // that starts the next one does not wait for it (settleQuickRebuilds).
  std::vector<bool> retrying_;

  // Drain/restore per rail.
  std::vector<std::unique_ptr<std::atomic<int>>> controlRequest_;  // set by the HTTP thread
  std::vector<bool> drained_;  // out of the split on request (connections kept)

  // Last: the threads stop (join) before the state they read is destroyed.
  std::vector<std::unique_ptr<RailWorker>> workers_;
};

}  // namespace nezha
