// Re-admission: a failed rail comes back only after a real end-to-end test on it, rebuilt in the
// background while operations continue on the other rails.
//
//   1. Ready: on every rank the rail's link is up and it failed at least its hold-down ago
//      (decided in the per-operation agreement, so every rank starts at the same operation).
//   2. Start: each rank opens a fresh listening socket; ports are agreed in one extra round; the
//      rebuild (connect with a deadline, a latency probe and a bandwidth probe allreduce on the
//      new connections) runs on the rail's own thread — the rail carries no slices meanwhile —
//      so a black hole costs the job nothing: the connect simply times out in the background.
//   3. Decide: every later agreement carries, per rebuilding rail, "failed here" (or "too slow
//      here") and "not done here". Any failure abandons it on every rank, and it is tried again
//      one hold-down later; when every rank is done, the probe times are max-reduced and the
//      rail re-enters with the share its measured bandwidth earns (a rail that became slow comes
//      back small), unless that share is below NEZHA_SLOW_FLOOR — then it stays out, as slow,
//      and is probed again one hold-down later.
//
// Recovery within a second of the heal (bench/README.md, "Chaos scenario"): a rejected probe
// does not lengthen the wait for the next one (only a rail that fails again after coming back
// waits twice as long: flap damping), a rebuild's connect sends a fresh SYN every quarter
// second (base/socket.cc) instead of the kernel's 1 s, 3 s, ... retransmits, so a rebuild
// running when a black hole closes connects right after, and a bandwidth probe stops as soon as
// the rail can no longer reach the floor, so a gray rail is re-probed about every second.
//
// Connections carry the rail's new generation in their handshake (`session/rail<i>/gen<g>`):
// nothing of an old generation can be taken for the new one.
#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "failover/failover_engine.h"
#include "schedule/probe.h"
#include "transport/transport.h"

namespace nezha {

namespace {
constexpr std::chrono::milliseconds kMaxHoldDown{60000};
// A rebuild's connect must finish within this (or the progress floor, if longer). Meanwhile it
// knocks with a fresh SYN every quarter second, so a black hole that closes while it runs is
// noticed at once; one that closes in the hold-down between two attempts, at the next.
constexpr std::chrono::milliseconds kConnectBudget{2000};
// The whole probe (latency + bandwidth) must finish within this: a rail too slow for it is
// rejected as slow and tried again later.
constexpr std::chrono::milliseconds kProbeBudget{5000};
constexpr size_t kMinProbeBytes = 64 << 10;
// How long the operation boundary that starts a rebuild waits for it (connect + probe of a
// healthy rail take tens of milliseconds here); longer ones go on in the background. Retries of
// a rail still faulty, and first tries of a rail whose carrier never dropped, are not waited
// for: they would cost the job this much each time (settleQuickRebuilds()).
constexpr std::chrono::milliseconds kQuickRebuild{200};
// The probe stops once its bulk allreduce has run this much longer than the floor's bandwidth
// allows (margin for the latency the measurement subtracts and for a busy machine).
constexpr double kSlowProbeMargin = 1.25;
// Rounds of the bandwidth probe; the fastest counts. A rail that heals while the first runs (a
// gray rail back at its rate) is measured at its healed speed by the next, not at the mix of
// both, which would bring it back with a sliver of its share.
constexpr int kBulkProbeRounds = 2;
}  // namespace

bool FailoverEngine::readyLocally(int r) const {
  if (o_.readmitHoldDown.count() == 0 || linkDown_[r]->load()) return false;
  const auto now = std::chrono::steady_clock::now();
  const auto upAt =
      std::chrono::steady_clock::time_point(std::chrono::nanoseconds(linkUpAt_[r]->load()));
  return now - failedAt_[r] >= holdDown_[r] && now - upAt >= holdDown_[r];
}

// Step 2 for every rail agreed ready: listeners, the ports round, the background task.
void FailoverEngine::startRebuilds(const std::vector<int>& railsReady) {
  const int n = o_.worldSize;
  const size_t k = railsReady.size();
  std::vector<std::shared_ptr<Rebuild>> fresh(k);
  std::vector<double> ports(k * (n + 1), 0.0);  // per rail: each rank's port, then "failed"
  for (size_t j = 0; j < k; ++j) {
    const int r = railsReady[j];
    auto rb = std::make_shared<Rebuild>();
    rb->gen = generation_[r]->fetch_add(1) + 1;
    try {
      rb->transport = makeTransport_(r);
      rb->transport->setHealthListener(
          [this, r](const std::string& why) { onTransportFault(r, why); });
      ports[j * (n + 1) + o_.rank] = rb->transport->endpoint().port;
    } catch (const Error& e) {
      ports[j * (n + 1) + n] = 1;
      if (o_.verbose) std::fprintf(stderr, "nezha: rank %d: rebuild: %s\n", o_.rank, e.what());
    }
    fresh[j] = std::move(rb);
  }
  agree(ports, o_.ioTimeout);
  for (size_t j = 0; j < k; ++j) {
    const int r = railsReady[j];
    if (ports[j * (n + 1) + n] != 0) {
      rejectRebuild(r, fresh[j], "probe", "a rank could not open its listening socket", 0);
      continue;
    }
    JobTable jt = job_;
    jt.session += strCat("/rail", r, "/gen", fresh[j]->gen);
    for (int p = 0; p < n; ++p)
      jt.ranks[p].rails[r].port = static_cast<int>(ports[j * (n + 1) + p]);
    launchRebuild(r, fresh[j], std::move(jt));
  }
}

// A healthy rail's rebuild ends within milliseconds; deciding it at the boundary that started
// it, instead of at the next one, lets it carry its share one operation sooner (with large
// operations, about a second sooner). Worth waiting for only where the rail is likely healed:
// its carrier came back since it failed (a cable or switch port back). A rail that failed with
// its carrier up (a black hole, a dead far end) meets its first try one hold-down later with
// the fault mostly still there, and that wait cost the NCCL plugin's ring loop 200 ms of every
// black hole (docs/nccl.md "Benchmark"); such a try, like any retry, goes on in the background
// and is decided at a later boundary. Ranks that do not wait meet the others in the round
// after it: all started the same rebuilds at this boundary.
bool FailoverEngine::carrierBackSinceFailure(size_t r) const {
  const auto upAt =
      std::chrono::steady_clock::time_point(std::chrono::nanoseconds(linkUpAt_[r]->load()));
  return upAt > failedAt_[r];
}

void FailoverEngine::settleQuickRebuilds() {
  const size_t n = rails_.size();
  const auto until = std::chrono::steady_clock::now() + kQuickRebuild;
  for (size_t r = 0; r < n; ++r) {
    if (rebuilds_[r] && !retrying_[r] && carrierBackSinceFailure(r)) {
      rebuilds_[r]->task.waitFor(std::max(until - std::chrono::steady_clock::now(),
                                          std::chrono::steady_clock::duration::zero()));
    }
  }
  std::vector<double> flags(2 * n, 0.0);
  for (size_t r = 0; r < n; ++r) rebuildFlags(r, flags[r], flags[n + r]);
  agree(flags, o_.ioTimeout);
  advanceRebuilds(std::vector<double>(flags.begin(), flags.begin() + n),
                  std::vector<double>(flags.begin() + n, flags.end()));
}

// The background part of a rebuild, on rail r's own thread.
void FailoverEngine::launchRebuild(int r, const std::shared_ptr<Rebuild>& rb, JobTable jt) {
  rb->started = std::chrono::steady_clock::now();
  rebuilds_[r] = rb;
  const size_t floats = std::max(o_.probeBytes, kMinProbeBytes) / 4;
  rb->probeBytes = floats * 4;
  rb->floorBandwidth = floorBandwidth(r);
  const auto connectBudget = std::max(kConnectBudget, o_.progressFloor);
  // The task owns what it touches (rb, a copy of the table); it never touches the
  // communicator's state, so it may outlive a rebuild the job has given up on.
  workers_[r]->submit(
      [rb, jt = std::move(jt), connectBudget, floats, algo_ = algo_, floor = o_.progressFloor] {
        try {
          Transport& t = *rb->transport;
          t.connect(jt, Clock::now() + connectBudget);
          t.setProgressTimeout(2 * floor);
          const auto start = Clock::now();
          t.setProgressWatch([start](Clock::time_point) -> std::string {
            if (Clock::now() - start < kProbeBudget) return "";
            return strCat("probe did not finish within ", kProbeBudget.count(), " ms");
          });
          Scratch probeScratch;
          double tiny = 1;
          nezha::allreduceRecursiveDoubling(t, reinterpret_cast<char*>(&tiny), 1,
                                            DataType::kFloat64, ReduceOp::kSum,
                                            probeScratch);  // warm-up; also checks the sum
          if (tiny != jt.ranks.size()) throw RailError(-1, strCat("probe sum ", tiny));
          // The floor of several rounds, as at init (schedule/probe.cc says why): the rail is
          // compared with rails measured that way when the cold rail is chosen again.
          rb->latency = 1e30;
          for (int i = 0; i < kLatencyProbeRounds; ++i) {
            rb->latency = std::min(rb->latency, timeTinyAllreduce(t, probeScratch));
          }
          // Past this a round's bandwidth is below the floor whatever comes: stop as slow.
          const auto slowAfter =
              rb->floorBandwidth > 0
                  ? std::chrono::duration<double>(
                        kSlowProbeMargin * static_cast<double>(rb->probeBytes) / rb->floorBandwidth)
                  : std::chrono::duration<double>(kProbeBudget);
          rb->bulk = 1e30;
          for (int round = 0; round < kBulkProbeRounds; ++round) {
            std::vector<float> bulk(floats, 1.0f);
            const auto t0 = Clock::now();
            // The watch lives in rb's transport, so it names rb by a plain pointer: a copy of
            // rb would be a cycle (rb -> transport -> watch -> rb) that no one frees when the
            // probe throws before it clears the watch (a peer torn down mid-probe).
            t.setProgressWatch([start, t0, slowAfter,
                                self = rb.get()](Clock::time_point) -> std::string {
              if (Clock::now() - start >= kProbeBudget) {
                return strCat("probe did not finish within ", kProbeBudget.count(), " ms");
              }
              if (Clock::now() - t0 < slowAfter) return "";
              self->tooSlow = true;
              return strCat("probe slower than the floor's ", self->floorBandwidth / 1e6, " MB/s");
            });
            nezha::allreduce(t, reinterpret_cast<char*>(bulk.data()), floats, DataType::kFloat32,
                             ReduceOp::kSum, probeScratch, algo_);
            rb->bulk = std::min(rb->bulk, std::chrono::duration<double>(Clock::now() - t0).count());
            if (bulk[floats - 1] != static_cast<float>(jt.ranks.size())) {
              throw RailError(-1, "probe allreduce gave a wrong result");
            }
          }
          t.setProgressWatch(nullptr);
          rb->state = Rebuild::kOk;
        } catch (const std::exception& e) {
          rb->error = e.what();
          rb->state = rb->tooSlow ? Rebuild::kSlow : Rebuild::kFailed;
        }
      },
      &rb->task);
}

// This rank's part of the per-operation round for rebuilding rails: [failed here, not done].
void FailoverEngine::rebuildFlags(size_t r, double& failedHere, double& notDone) const {
  failedHere = notDone = 0;
  if (!rebuilds_[r]) return;
  const int st = rebuilds_[r]->state.load();
  // 2 = too slow, 1 = failed: the max over the ranks keeps "slow" when one rank timed the rail
  // out (its peers' probes then fail as the connection goes).
  failedHere = st == Rebuild::kSlow ? 2 : st == Rebuild::kFailed || linkDown_[r]->load() ? 1 : 0;
  notDone = st == Rebuild::kRunning ? 1 : 0;
}

// Step 3, with the agreed flags of the last round.
void FailoverEngine::advanceRebuilds(const std::vector<double>& failed,
                                     const std::vector<double>& notDone) {
  std::vector<int> finishing;
  for (size_t r = 0; r < rails_.size(); ++r) {
    if (!rebuilds_[r]) continue;
    if (failed[r] > 1) {
      std::shared_ptr<Rebuild> rb = std::move(rebuilds_[r]);
      // The rail is below the floor's bandwidth: that bound is what was measured.
      rejectRebuild(static_cast<int>(r), rb, "slow",
                    strCat("the bandwidth probe could not reach the floor's ",
                           rb->floorBandwidth / 1e6, " MB/s"),
                    rb->floorBandwidth);
    } else if (failed[r] > 0) {
      std::shared_ptr<Rebuild> rb = std::move(rebuilds_[r]);
      const std::string why = rb->state == Rebuild::kFailed ? rb->error : "failed on a peer";
      rejectRebuild(static_cast<int>(r), rb, "probe", why, 0);
    } else if (notDone[r] == 0) {
      finishing.push_back(static_cast<int>(r));
    }
  }
  if (finishing.empty()) return;
  // Every rank is done: the same probe times everywhere (max), so the same decision everywhere.
  std::vector<double> times;
  for (int r : finishing) {
    times.push_back(rebuilds_[r]->latency);
    times.push_back(rebuilds_[r]->bulk);
  }
  agree(times, o_.ioTimeout);
  std::vector<bool> alive = sched_->alive();
  for (size_t j = 0; j < finishing.size(); ++j) {
    const int r = finishing[j];
    std::shared_ptr<Rebuild> rb = std::move(rebuilds_[r]);
    const double latency = times[2 * j], bulk = times[2 * j + 1];
    const double bandwidth = static_cast<double>(rb->probeBytes) / std::max(bulk - latency, 1e-7);
    const double share = sched_->shareNextToOthers(r, bandwidth, alive);
    // An offload rail (SHARP) never carries byte slices, so its share of the job's bandwidth says
    // nothing about its worth, and a probe timed while the other rails are busy made it look
    // "slow" (testbed_sharp's cut scenario flaked on exactly that). Its test is the exact probe
    // result within kProbeBudget, which a gray rail fails as "slow" anyway.
    if (share < o_.slowFloor && !sched_->isOffload(r)) {
      rejectRebuild(r, rb, "slow",
                    strCat("measured ", bandwidth / 1e6, " MB/s, ", share * 100,
                           "% of the job's bandwidth (floor ", o_.slowFloor * 100, "%)"),
                    bandwidth);
      continue;
    }
    installRail(r, rb, latency, bandwidth);
    alive[r] = true;
  }
}

void FailoverEngine::rejectRebuild(int r, const std::shared_ptr<Rebuild>& rb,
                                   const std::string& reason, const std::string& why,
                                   double bandwidth) {
  if (rb->transport) rb->transport->abort();  // a task still connecting fails at once
  if (rb->state == Rebuild::kRunning) abandoned_.push_back(rb);  // reaped when its task ends
  failedAt_[r] = std::chrono::steady_clock::now();
  retrying_[r] = true;  // tried again one hold-down later, unchanged (see the top of this file)
  FailoverEvent ev = railEvent(r, reason);
  ev.localError = why;
  ev.measuredBandwidth = bandwidth;
  metrics_.rejectedReadmissions.push_back(ev);
  if (reason == "slow") metrics_.rails[rails_[r].name].slow = true;
  if (o_.verbose) {
    std::fprintf(stderr, "nezha: rank %d: rail %s stays out (%s: %s); next try in %lld ms\n",
                 o_.rank, rails_[r].name.c_str(), reason.c_str(), why.c_str(),
                 static_cast<long long>(holdDown_[r].count()));
  }
}

void FailoverEngine::reapAbandoned() {
  abandoned_.erase(
      std::remove_if(abandoned_.begin(), abandoned_.end(),
                     [](const std::shared_ptr<Rebuild>& rb) { return rb->task.done(); }),
      abandoned_.end());
}

// Puts the rebuilt rail back into the split on this rank (every rank does the same now), with
// the share its measured bandwidth earns.
void FailoverEngine::installRail(int r, const std::shared_ptr<Rebuild>& rb, double latency,
                                 double bandwidth) {
  rb->task.wait();  // done already (state != running); makes its writes visible
  metrics_.railRejectedConnections += rb->transport->rejectedConnections();
  agreement_->attach(r, rb->transport->releaseControl());
  {
    std::lock_guard<std::mutex> lock(channelMu_);
    channels_[r] = std::move(rb->transport);
    faultWhy_[r].clear();
  }
  reportedDownBy_[r]->store(0);
  localDown_[r] = false;
  rails_[r].latencySeconds = latency;
  rails_[r].bandwidthBytesPerSecond = bandwidth;
  reprobed_[r] = true;
  retrying_[r] = false;
  sched_->remeasure(r, latency, bandwidth);
  std::vector<bool> alive = sched_->alive();
  alive[r] = true;
  sched_->setAlive(alive);
  RailMetrics& m = metrics_.rails[rails_[r].name];
  m.alive = true;
  m.slow = false;
  FailoverEvent ev = railEvent(r, "probe");
  ev.stallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - rb->started).count();
  ev.measuredBandwidth = bandwidth;
  metrics_.readmissions.push_back(ev);
  // A rail that fails again soon after coming back waits longer next time.
  holdDown_[r] = std::min(2 * holdDown_[r], kMaxHoldDown);
  if (o_.verbose) {
    std::fprintf(stderr, "nezha: rank %d: rail %s re-admitted after op %llu (%.1f MB/s)\n", o_.rank,
                 ev.rail.c_str(), static_cast<unsigned long long>(ev.op), bandwidth / 1e6);
  }
}

// The bandwidth (bytes/s, as the probe measures it) at which rail r's share next to the rails in
// the split now is exactly NEZHA_SLOW_FLOOR; 0 when no floor applies (none set, or an offload
// rail, which carries no byte slices). From the scheduler's agreed values: the same everywhere.
double FailoverEngine::floorBandwidth(int r) const {
  if (o_.slowFloor <= 0 || sched_->isOffload(r)) return 0;
  // share(own) = own / (own + others), so one share at any reference bandwidth gives `others`.
  const double reference = 1e9;
  const double share = sched_->shareNextToOthers(r, reference, sched_->alive());
  const double others = reference * (1 - share) / share;
  return o_.slowFloor / (1 - o_.slowFloor) * others;
}

FailoverEvent FailoverEngine::railEvent(int r, const std::string& reason) const {
  FailoverEvent ev;
  ev.op = eventOpNumber();
  ev.rail = rails_[r].name;
  ev.reason = reason;
  ev.unixSeconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return ev;
}

}  // namespace nezha
