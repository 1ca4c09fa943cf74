// The communicator's state, shared by the files that implement it:
//   comm/communicator_setup.cc   construction: rails, rendezvous, connections, probe, scheduler
//   comm/preflight_run.cc        the start-up check of every rail
//   comm/communicator.cc         the public collectives, operation numbering, reports
//   comm/control_status.cc       the /status and /metrics snapshots, drain/restore requests
// Running operations across the rails, failover, re-admission and drain live in the failover
// engine (failover/failover_engine.h), which the communicator drives.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/congestion_control.h"
#include "base/rail_worker.h"
#include "bootstrap/rendezvous.h"
#include "collectives/collectives.h"
#include "comm/config.h"
#include "control/control_server.h"
#include "control/request_auth.h"
#include "failover/control_mesh.h"
#include "failover/failover_engine.h"
#include "failover/link_watch.h"
#include "preflight/preflight.h"
#include "schedule/scheduler.h"
#include "transport/transport.h"

namespace nezha {

struct Communicator::Impl {
  Options o;
  AlgoTable algoTable;  // Options::algoTable parsed (or the built-in rules)
  AlgoOptions algo;     // algoTable.options(), what the rail threads read
  std::vector<RailInfo> rails;
  std::unique_ptr<Scheduler> sched;
  uint64_t opCounter = 0;
  OpReport last;
  Metrics metrics;
  JobTable job;
  // NEZHA_TCP_CONGESTION as resolved at start (the init log line and /status say it).
  CongestionChoice congestion;

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

  // ---- the failover engine (failover/failover_engine.h) --------------------------------------
  // Runs every operation's slices on the rails and finishes it when a rail breaks; owns the
  // rails' channels and threads. Declared before mesh/watcher/control, which call into it from
  // their threads and so must stop first.
  std::unique_ptr<FailoverEngine> engine;
  using Outcome = FailoverEngine::Outcome;
  using SliceFn = FailoverEngine::SliceFn;
  using MakeSliceFn = FailoverEngine::MakeSliceFn;
  void agree(std::vector<double>& v, std::chrono::milliseconds timeout) {
    engine->agree(v, timeout);
  }

  // ---- control endpoint (control_status.cc) ------------------------------------------------
  std::mutex statusMu;
  std::string statusJson = "{}", metricsText;
  void publish();
  std::string metricsExposition() const;
  const RailMetrics& metricsOf(const std::string& rail) const;
  HttpReply handleControl(const HttpRequest& request);
  ControlRequestVerifier controlVerifier;  // remembers spent nonces (control/request_auth.h)

  // ---- operations (communicator.cc) --------------------------------------------------------
  // Running hash of the operations since the last tuning agreement (kind, size, dtype, root),
  // so the round can tell when ranks called different collectives or sizes. 32 bits: exact in
  // a double.
  uint32_t signature = 2166136261u;
  uint64_t signatureSince = 0;
  void fold(uint64_t v);
  // The caller's signature of the next operation (Communicator::signNextOp), zero-padded;
  // beginOp hands it to the engine and clears it.
  std::string nextSignature;
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
