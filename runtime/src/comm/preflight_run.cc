// The communicator's side of the pre-flight check (preflight.h): concurrent connects and
// transfers at start, the agreement on what failed, the policy, and the wait for failed rails.
#include <algorithm>
#include <cstdio>
#include <thread>
#include <tuple>

#include "base/error.h"
#include "comm/communicator_impl.h"
#include "preflight/preflight.h"

namespace nezha {

using Impl = Communicator::Impl;

namespace {
// NEZHA_PREFLIGHT=wait polls re-admission this often; each poll is a barrier (an operation).
constexpr std::chrono::milliseconds kWaitPace{200};
// Up to this many ranks the agreement carries a slot per rank (every rank learns every failing
// rank); beyond, one slot per rail.
constexpr int kListEveryRankUpTo = 64;
}  // namespace

std::vector<std::vector<PreflightFailure>> Impl::connectAndCheck(
    std::vector<std::unique_ptr<Transport>>& transports, const StartState& start) {
  const size_t nr = rails.size();
  const bool check = o.preflight != PreflightPolicy::kOff;
  const auto now = Clock::now();
  const Deadline deadline =
      now + (check ? std::min(o.preflightTimeout, o.rendezvousTimeout) : o.rendezvousTimeout);
  const std::vector<int> peers = check ? preflightPeers(o.rank, o.worldSize) : std::vector<int>{};
  std::vector<std::vector<PreflightFailure>> local(nr);
  // Every rail connects (and checks) on its own thread: a rail that cannot connect costs the
  // start its deadline once, and the other rails are not left with a deadline already spent.
  std::vector<TaskHandle> tasks(nr);
  for (size_t i = 0; i < nr; ++i) {
    transports[i]->setHealthListener(
        [this, i](const std::string& why) { engine->onTransportFault(i, why); });
    if (!start.usable[i]) continue;
    Transport* t = transports[i].get();
    std::vector<PreflightFailure>* failures = &local[i];
    engine->worker(static_cast<int>(i))
        .submit(
            [this, t, failures, deadline, &peers, check] {
              t->connect(job, deadline);
              if (!check || peers.empty()) return;
              const auto left =
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
              t->setProgressTimeout(std::max(left, o.progressFloor));
              *failures = checkTransfers(*t, peers, o.preflightBytes);
              t->setProgressTimeout(std::chrono::milliseconds(0));
            },
            &tasks[i]);
  }
  std::exception_ptr fatal;
  for (size_t i = 0; i < nr; ++i) {
    if (!start.usable[i]) continue;
    try {
      tasks[i].wait();
    } catch (const PeerConnectError& e) {
      if (!check) fatal = fatal ? fatal : std::current_exception();
      local[i].push_back({o.rank, static_cast<int>(i), e.peer(), strCat("connect: ", e.what())});
    } catch (const RailError& e) {
      if (!check) fatal = fatal ? fatal : std::current_exception();
      local[i].push_back({o.rank, static_cast<int>(i), -1, strCat("connect: ", e.what())});
    } catch (...) {
      // Wrong token, bad configuration: not a rail problem; every task is waited for first.
      fatal = fatal ? fatal : std::current_exception();
    }
  }
  if (fatal) std::rethrow_exception(fatal);
  preflight.peersChecked = peers.size();
  return local;
}

void Impl::decidePreflight(const std::vector<std::vector<PreflightFailure>>& local,
                           std::vector<std::unique_ptr<Transport>>& transports, StartState& start,
                           std::chrono::steady_clock::time_point began) {
  const size_t nr = rails.size();
  const int n = o.worldSize;
  std::vector<std::string> names;
  for (const auto& r : rails) names.push_back(r.name);
  std::vector<PreflightFailure> mine;
  bool anyConnected = false;
  for (size_t i = 0; i < nr; ++i) {
    mine.insert(mine.end(), local[i].begin(), local[i].end());
    anyConnected = anyConnected || (start.usable[i] && local[i].empty());
  }
  if (!anyConnected) {
    for (auto& t : transports) t->abort();
    throw RailError(-1, strCat("pre-flight: no rail connects rank ", o.rank,
                               " to its peers: ", describeFailures(mine, names)));
  }
  // What failed where, in one control-mesh round (element-wise max). Up to kListEveryRankUpTo
  // ranks every rank has its own slot, so every rank learns every failing rank; beyond that one
  // slot per rail names the highest failing rank (each rank's /status lists its own pairs, and
  // the operator gathers them), keeping the round as small as a per-operation agreement.
  const size_t slots = n <= kListEveryRankUpTo ? static_cast<size_t>(n) : 1;
  const size_t mySlot = slots == 1 ? 0 : static_cast<size_t>(o.rank);
  // A failing pair as one exactly representable number: rank * (n + 2) + (peer + 2) > 0.
  const double base = n + 2.0;
  std::vector<double> seen(slots * nr, 0.0);
  for (size_t i = 0; i < nr; ++i) {
    if (!local[i].empty()) seen[mySlot * nr + i] = o.rank * base + (local[i].front().peer + 2);
  }
  agree(seen, o.ioTimeout);
  preflight.failures.clear();
  preflight.failedRails.assign(nr, false);
  for (size_t slot = 0; slot < slots; ++slot) {
    for (size_t i = 0; i < nr; ++i) {
      const auto code = static_cast<int64_t>(seen[slot * nr + i]);
      if (code <= 0) continue;
      preflight.failedRails[i] = true;
      const int rank = static_cast<int>(code / static_cast<int64_t>(base));
      const int peer = static_cast<int>(code % static_cast<int64_t>(base)) - 2;
      if (rank != o.rank) preflight.failures.push_back({rank, static_cast<int>(i), peer, ""});
    }
  }
  for (size_t i = 0; i < nr; ++i) {
    preflight.failures.insert(preflight.failures.end(), local[i].begin(), local[i].end());
  }
  std::sort(preflight.failures.begin(), preflight.failures.end(),
            [](const PreflightFailure& a, const PreflightFailure& b) {
              return std::tie(a.rank, a.rail, a.peer) < std::tie(b.rank, b.rail, b.peer);
            });
  preflight.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (preflight.failures.empty()) {
    preflight.result = "passed";
    return;
  }
  const std::string all = describeFailures(preflight.failures, names);
  if (o.preflight == PreflightPolicy::kFail || !o.failover) {
    preflight.result = "failed";
    for (auto& t : transports) t->abort();
    throw RailError(-1, strCat("pre-flight failed (NEZHA_PREFLIGHT=", toString(o.preflight),
                               o.failover ? "" : ", NEZHA_FAILOVER=stop", "): ", all));
  }
  for (size_t i = 0; i < nr; ++i) {
    if (!preflight.failedRails[i] || !start.usable[i]) continue;
    std::vector<PreflightFailure> onRail;
    std::vector<int> ranks;
    for (const PreflightFailure& f : preflight.failures) {
      if (f.rail != static_cast<int>(i)) continue;
      onRail.push_back(f);
      if (std::find(ranks.begin(), ranks.end(), f.rank) == ranks.end()) ranks.push_back(f.rank);
    }
    transports[i]->abort();
    start.leaveOut(
        i, "preflight", ranks,
        strCat(rails[i].name, " failed pre-flight (", describeFailures(onRail, names, 4), ")"));
  }
  if (std::none_of(start.usable.begin(), start.usable.end(), [](bool u) { return u; })) {
    throw RailError(-1, strCat("cannot start: every rail failed pre-flight: ", all));
  }
  preflight.result = o.preflight == PreflightPolicy::kWait ? "waiting" : "failed";
  std::fprintf(stderr, "nezha: rank %d: starting without %s\n", o.rank, start.downAtStart.c_str());
}

bool Impl::preflightRailsBack() const {
  if (!sched) return false;
  const std::vector<bool> alive = sched->alive();
  for (size_t i = 0; i < preflight.failedRails.size(); ++i) {
    if (preflight.failedRails[i] && !alive[i]) return false;
  }
  return true;
}

std::string Impl::preflightResult() const {
  if ((preflight.result == "failed" || preflight.result == "waiting") && preflightRailsBack()) {
    return "recovered";
  }
  return preflight.result;
}

void Communicator::waitForPreflightRails() {
  Impl& m = *impl_;
  const auto until = std::chrono::steady_clock::now() + m.o.preflightWait;
  for (;;) {
    barrier();  // an operation: its agreement is where re-admission starts and finishes
    // Both answers agreed, so every rank leaves the loop at the same barrier.
    std::vector<double> state = {m.preflightRailsBack() ? 0.0 : 1.0,
                                 std::chrono::steady_clock::now() >= until ? 1.0 : 0.0};
    m.agree(state, m.o.ioTimeout);
    if (state[0] == 0) break;
    if (state[1] > 0) {
      std::vector<std::string> names;
      for (const auto& r : m.rails) names.push_back(r.name);
      throw RailError(-1, strCat("pre-flight: rails still failing after NEZHA_PREFLIGHT_WAIT_MS=",
                                 m.o.preflightWait.count(), ": ",
                                 describeFailures(m.preflight.failures, names)));
    }
    std::this_thread::sleep_for(kWaitPace);
  }
  m.preflight.result = "recovered";
  m.publish();
}

}  // namespace nezha
