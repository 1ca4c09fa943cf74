// The communicator's state, shared by the files that implement it:
//   comm/communicator_setup.cc   construction: rails, rendezvous, connections, probe, scheduler
//   comm/communicator.cc         the public collectives, operation numbering, reports
//   comm/failover.cc         running slices, failure agreement, replay on survivors
//   comm/readmission.cc      bringing a healed rail back
//   comm/control_status.cc    drain/restore, /status and /metrics
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
#include "comm/config.h"
#include "control/control_server.h"
#include "failover/control_mesh.h"
#include "failover/link_watch.h"
#include "failover/watchdog.h"
#include "preflight/preflight.h"
#include "schedule/scheduler.h"
#include "transport/transport.h"

namespace nezha {

struct Communicator::Impl {
  Options o;
  AlgoTable algoTable;  // Options::algoTable parsed (or the built-in rules)
  AlgoOptions algo;     // algoTable.options(), what the rail threads read
  std::vector<RailInfo> rails;
  std::vector<std::unique_ptr<Channel>> channels;    // empty when worldSize == 1
  std::vector<std::unique_ptr<RailWorker>> workers;  // one per channel
  std::vector<Scratch> scratch;                      // touched only by the rail's worker
  std::unique_ptr<Scheduler> sched;
  uint64_t opCounter = 0;
  OpReport last;
  Metrics metrics;
  JobTable job;

  // The first fatal error's message; afterwards every operation is refused (the connections
  // were broken so peers fail at once instead of after their timeout).
  std::string failure;
  int failureRail = -1;
  [[noreturn]] void failStop(const RailError& e);
  void checkUsable() const;
  // Runs fn on `rail`'s thread outside any operation (start-up); a failure is fatal.
  void runOn(int rail, const std::function<void(Channel&, Scratch&)>& fn);

  // ---- construction (communicator_setup.cc) ------------------------------------------------
  struct StartState {
    std::vector<bool> usable;  // rails that start in the split
    std::string downAtStart;   // why the others do not
    // Per rail left out: the failover reason ("carrier", "preflight") and the ranks that saw it.
    std::vector<std::string> downReason;
    std::vector<std::vector<int>> downRanks;
    void leaveOut(size_t rail, const std::string& reason, std::vector<int> ranks,
                  const std::string& why);
  };
  void describeRails();
  std::vector<std::unique_ptr<Transport>> joinJob(StartState& start);
  void allocateRailState(size_t rails);
  void connectRails(std::vector<std::unique_ptr<Transport>>& transports, StartState& start);

  // ---- pre-flight (preflight/preflight.h; comm/preflight_run.cc) ----
  struct PreflightReport {
    std::string result = "off";              // passed | failed | waiting | recovered | off
    std::vector<PreflightFailure> failures;  // every failing pair, all ranks (own with reasons)
    std::vector<bool> failedRails;
    size_t peersChecked = 0;  // peers this rank transferred to, per rail
    double seconds = 0;       // connect + transfer + agreement
  };
  PreflightReport preflight;
  // Per rail: bandwidthBytesPerSecond is a measurement (init or re-admission probe), not a
  // stand-in; only those are compared with the expected speed (control_status.cc).
  std::vector<bool> bandwidthMeasured;
  // Connects the usable rails concurrently (each on its own thread) and, unless the policy is
  // off, runs the transfers; returns this rank's failures per rail. Policy off: rethrows.
  std::vector<std::vector<PreflightFailure>> connectAndCheck(
      std::vector<std::unique_ptr<Transport>>& transports, const StartState& start);
  // Agrees on every rank's failures and applies NEZHA_PREFLIGHT (fail: throws; degrade/wait:
  // the failing rails leave `start`).
  void decidePreflight(const std::vector<std::vector<PreflightFailure>>& local,
                       std::vector<std::unique_ptr<Transport>>& transports, StartState& start,
                       std::chrono::steady_clock::time_point began);
  bool preflightRailsBack() const;
  std::string preflightResult() const;  // "failed" turns "recovered" once every rail is back
  void startScheduler(const StartState& start);
  void startControl();

  // ---- failover (failover.cc) -------------------------------------------------------------
  std::vector<bool> localDown;  // rails this rank has shut (failed here or agreed dead)
  // Per rail, set from other threads: the link watcher (this rank lost carrier) and the control
  // mesh (peer + 1 of the rank that reported losing it; 0 = none).
  std::vector<std::unique_ptr<std::atomic<bool>>> linkDown;
  std::vector<std::unique_ptr<std::atomic<int>>> reportedDownBy;
  std::chrono::steady_clock::time_point opStart;

  struct Outcome {
    std::vector<double> secs;  // per rail, summed over attempts
    std::vector<Slice> done;   // slices that completed on every rank
    bool replayed = false;
    // A peer was still in the previous (round-free) operation and failed it: this rank redid
    // that one with it, and the caller must run its own operation again from a fresh plan.
    bool restart = false;
  };
  // Runs every slice on its rail concurrently and, with failover, redoes failed slices on the
  // surviving rails until every slice completed on every rank (or no rail is left: RailError).
  // `fn` must be re-runnable for a slice: it reads only preserved inputs.
  using SliceFn = std::function<void(Channel&, Scratch&, const Slice&)>;
  struct Kept;
  // `next`: this operation's copy of its inputs when it may skip its round (roundFree()); it
  // becomes `kept` when the operation finished here without a round.
  Outcome runSlices(const Plan& plan, const SliceFn& fn, std::unique_ptr<Kept>* next = nullptr);
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
  };
  Attempt runAttempt(const Plan& plan, const std::vector<Slice>& todo, const SliceFn& fn,
                     Outcome& out);
  std::chrono::milliseconds progressDeadline(int rail, size_t bytes) const;
  std::string silentPeerVerdict(Clock::time_point moved, Clock::time_point start) const;
  void flagKnownDownRails(Attempt& at);
  // `patient`: a peer may still be computing before the operation that lets it join (it
  // finished a round-free operation this rank failed), so wait as long as for any I/O.
  void agreeOnAttempt(Attempt& at, bool patient);
  // From an attempt just run (or an empty one: a confirmation) to the end of the operation:
  // rounds, retired rails, redo on the survivors, re-admission. With `agreedAlready` the first
  // round was held by the caller. False when a kept operation had to be redone first.
  // `later`: chunks of this operation deferred to later waves (laterWaves).
  bool finish(const Plan& plan, const SliceFn& fn, std::vector<Slice> todo, Attempt at,
              Outcome& out, bool patient, bool agreedAlready = false,
              std::vector<Slice> later = {});
  // While a failed rail may come back (not alive, not drained), a large operation runs its
  // chunks in waves of Options::waveBytes per rail, each ended by the per-op round, so a rail
  // ready to return re-enters between waves and carries its share of the rest of the operation
  // instead of waiting for the next operation (with ~1 s operations, up to a second sooner).
  // Keeps the first wave in `todo` and returns the rest. Decided from agreed state only.
  std::vector<Slice> laterWaves(std::vector<Slice>& todo) const;
  // Re-admission steps at a boundary (an operation's end, or between waves), with the last
  // round's agreed flags.
  void moveReadmissions(const Attempt& agreed);
  void retireRails(const std::vector<int>& leaving, Attempt& at);
  // A small control task (barrier) as a one-unit operation on the cold rail, with the same
  // failover as data slices. `fn` must be re-runnable.
  void runUnit(const std::function<void(Channel&, Scratch&)>& fn);
  void shutRail(int rail);
  void recordFailover(int rail, const std::string& localError, const std::vector<int>& ranks,
                      const std::string& reason);
  std::string failoverReason(int rail, const std::string& localError) const;
  bool ownDetectorFired(int rail) const;
  static int reasonRank(const std::string& reason);
  static std::string reasonName(int rank);
  std::unique_ptr<RailWatchdog> watchdog;
  [[noreturn]] void allRailsDown(const std::vector<std::string>& errors);
  std::vector<int> ownLinksDown() const;
  // Called from the watcher / mesh threads.
  void onLinkDown(size_t rail);
  void onLinkUp(size_t rail);
  void onPeerRailDown(int peer, int rail, uint64_t generation);
  // The transport reported its rail unusable out of band (Transport::HealthListener).
  void onTransportFault(size_t rail, const std::string& why);
  std::vector<std::string> faultWhy;  // per rail, the transport's last report; channelMu
  std::string railError(int rail, const std::string& what);

  // Element-wise max over all ranks on the control mesh; `timeout` bounds the wait for a peer
  // that is alive but slow. A peer that cannot be reached is fatal (failStop).
  void agree(std::vector<double>& v, std::chrono::milliseconds timeout);

  // ---- round-free small operations (failover.cc) ------------------------------------------
  // The last operation that skipped its round, with what a redo needs: the ranks that finished
  // it redo it with a peer that failed it (found out in the next round), writing into `out`.
  using MakeSliceFn = std::function<SliceFn(const char* in, char* out)>;
  struct Kept {
    uint64_t op = 0;
    Plan plan;
    std::vector<char> in, out;
    size_t outBytes = 0;
    MakeSliceFn make;  // captures nothing of the caller's stack
  };
  std::unique_ptr<Kept> kept;
  int64_t eventOp = -1;  // while redoing a kept operation: the operation events name
  static constexpr uint64_t kConfirmEvery = 16;  // every 16th operation holds its round
  bool roundFree(OpKind op, const Plan& plan) const;
  // Whether `plan` runs on the kept operation's rail alone (a peer that failed the kept
  // operation makes it fail too, so its round meets the peer's).
  bool continuesKept(const Plan& plan) const;
  void confirmKept();  // a round now, before this operation moves any data
  // Plans (again after a redo of a kept operation) and runs one operation; `in`/`inBytes` are
  // what a redo needs kept, `outBytes` the size of its output; `copyIn`: the operation would
  // overwrite inputs a replay needs, so it runs from a copy.
  Outcome runOp(OpKind op, const std::function<Plan()>& makePlan, const char* in, size_t inBytes,
                char* out, size_t outBytes, bool copyIn, const MakeSliceFn& make, Plan& plan);

  // ---- re-admission (readmission.cc) -------------------------------------------------------
  // Per rail, bumped per re-admission attempt; names the rail's connections so bytes (and
  // rail-down notices) of an older generation are never taken for the current one.
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> generation;
  std::vector<std::chrono::steady_clock::time_point> failedAt;
  std::vector<std::chrono::milliseconds> holdDown;
  std::vector<std::unique_ptr<std::atomic<int64_t>>> linkUpAt;  // steady ns; watcher thread
  mutable std::mutex channelMu;  // channels[r] swap vs. abort from the watcher / mesh threads
  // A rail being rebuilt in the background (connect + probe on the rail's own thread). Shared
  // with that task, which may outlive a rebuild the job gave up on.
  struct Rebuild {
    enum State : int { kRunning = 0, kOk = 1, kFailed = 2 };
    uint64_t gen = 0;
    std::unique_ptr<Transport> transport;
    TaskHandle task;
    std::atomic<int> state{kRunning};
    std::string error;             // written by the task before state
    double latency = 0, bulk = 0;  // probe seconds, written by the task before state
    size_t probeBytes = 0;
    std::chrono::steady_clock::time_point started;
  };
  std::vector<std::shared_ptr<Rebuild>> rebuilds;   // per rail, null = none; main thread
  std::vector<std::shared_ptr<Rebuild>> abandoned;  // given up, task still running
  bool readyLocally(int rail) const;
  bool rebuilding(int rail) const;
  void startRebuilds(const std::vector<int>& railsReady);
  // Right after startRebuilds: waits briefly for the rebuilds and decides them in one round, so
  // a healthy rail carries its share from the next operation on.
  void settleQuickRebuilds();
  void launchRebuild(int rail, const std::shared_ptr<Rebuild>& rb, JobTable jt);
  void rebuildFlags(size_t rail, double& failedHere, double& notDone) const;
  void advanceRebuilds(const std::vector<double>& failed, const std::vector<double>& notDone);
  void rejectRebuild(int rail, const std::shared_ptr<Rebuild>& rb, const std::string& reason,
                     const std::string& why, double bandwidth);
  void reapAbandoned();
  void installRail(int rail, const std::shared_ptr<Rebuild>& rb, double latency, double bandwidth);
  FailoverEvent railEvent(int rail, const std::string& reason) const;

  // ---- control endpoint (control_status.cc) ------------------------------------------------
  static constexpr int kDrain = 1, kRestore = 2;
  std::vector<std::unique_ptr<std::atomic<int>>> controlRequest;  // set by the HTTP thread
  std::vector<bool> drained;  // out of the split on request (connections kept)
  std::mutex statusMu;
  std::string statusJson = "{}", metricsText;
  void applyControl(const std::vector<double>& agreed);
  void publish();
  std::string railState(size_t rail) const;
  std::string metricsExposition() const;
  const RailMetrics& metricsOf(const std::string& rail) const;
  HttpReply handleControl(const HttpRequest& request);
  bool authorized(const HttpRequest& request, HttpReply& denied) const;

  // ---- operations (communicator.cc) --------------------------------------------------------
  // Running hash of the operations since the last tuning agreement (kind, size, dtype, root),
  // so the round can tell when ranks called different collectives or sizes. 32 bits: exact in
  // a double.
  uint32_t signature = 2166136261u;
  uint64_t signatureSince = 0;
  void fold(uint64_t v);
  void beginOp(OpKind op, size_t count, DataType dt, int root);
  void report(OpKind op, const Plan& plan, const Outcome& outcome);
  void report(OpKind op, const Plan& plan, const std::vector<double>& secs);
  Table loadTable(const std::vector<std::string>& names, int rail);

  // Last members: their threads stop (join) before the state they read is destroyed.
  std::unique_ptr<ControlMesh> mesh;  // agreement rounds and notices over every rail at once
  std::unique_ptr<LinkWatcher> watcher;
  std::unique_ptr<ControlServer> control;
};

}  // namespace nezha
