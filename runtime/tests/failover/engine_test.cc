// The failover engine driven directly, with scripted rails and a one-rank agreement: no sockets,
// no communicator. Each test runs operations whose slices copy their part of an input to an
// output (and touch the rail with an exchange, where a broken rail throws), so a result is
// exact only if every element was done once on a rail that did not fail.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "failover/engine_doubles.h"
#include "failover/failover_engine.h"
#include "schedule/algo_table.h"
#include "schedule/scheduler.h"

namespace nezha {
namespace {

using testing::LoopbackAgreement;
using testing::ScriptedRail;

constexpr size_t kFloat = sizeof(float);

// One rank, two (or more) scripted rails, a static split, the engine in between.
class EngineRig {
 public:
  explicit EngineRig(size_t rails = 2, std::chrono::milliseconds holdDown = {}) {
    o.rank = 0;
    o.worldSize = 1;
    o.policy = Policy::kStatic;  // a fixed split over the live rails, no tuning
    o.coldThreshold = 64 << 10;
    o.readmitHoldDown = holdDown;
    o.watchdog = std::chrono::milliseconds(0);
    o.verbose = getenv("ENGINE_TEST_VERBOSE") != nullptr;
    for (size_t r = 0; r < rails; ++r) {
      o.rails.push_back({"r" + std::to_string(r), "", "tcp", "10.0.0.1"});
      RailInfo info;
      info.name = o.rails.back().name;
      info.transport = "tcp";
      infos.push_back(info);
    }
    engine = std::make_unique<FailoverEngine>(o, infos, metrics, [this](int rail) {
      auto t = std::make_unique<ScriptedRail>(rail, infos[rail].name);
      if (rebuildsFail) t->failConnect();
      ++rebuildsMade;
      return t;
    });
    std::vector<std::unique_ptr<Channel>> channels;
    for (size_t r = 0; r < rails; ++r) {
      auto rail = std::make_unique<ScriptedRail>(static_cast<int>(r), infos[r].name);
      scripted.push_back(rail.get());
      channels.push_back(std::move(rail));
    }
    engine->adoptChannels(std::move(channels), std::vector<bool>(rails, true));
    engine->setAgreement(&agreement);
    JobTable job;
    job.session = "engine-test";
    job.ranks.resize(1);
    for (size_t r = 0; r < rails; ++r) job.ranks[0].rails.push_back(RailEndpoint{});
    engine->setJob(job, AlgoTable().options());  // the built-in rules, as without a file
    ProbeResult probe;
    probe.latency.assign(rails, 1e-5);
    probe.bandwidth.assign(rails, 1e9);
    std::vector<std::string> names;
    for (const auto& i : infos) names.push_back(i.name);
    sched = std::make_unique<Scheduler>(o, probe, Table(names));
    engine->setScheduler(sched.get());
  }

  // One "allreduce" of `count` floats whose slices copy in -> out. Returns the outcome; `out`
  // holds the result.
  FailoverEngine::Outcome copyOp(const std::vector<float>& in, std::vector<float>& out,
                                 Plan* planOut = nullptr) {
    engine->beginOp(op++);
    out.assign(in.size(), -1.0f);
    auto makePlan = [&] { return sched->plan(OpKind::kAllreduce, in.size(), kFloat); };
    FailoverEngine::MakeSliceFn make = [](const char* src, char* dst) -> FailoverEngine::SliceFn {
      return [src, dst](Channel& ch, Scratch&, const Slice& s) {
        std::vector<IoOp> none;
        ch.exchange(none);  // a broken rail throws here, before any byte is written
        std::copy(src + s.offset * kFloat, src + (s.offset + s.count) * kFloat,
                  dst + s.offset * kFloat);
      };
    };
    Plan plan;
    auto ran = engine->runOp(OpKind::kAllreduce, makePlan, reinterpret_cast<const char*>(in.data()),
                             in.size() * kFloat, reinterpret_cast<char*>(out.data()),
                             out.size() * kFloat, false, make, plan);
    if (planOut) *planOut = plan;
    return ran;
  }

  static std::vector<float> ramp(size_t n) {
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), 1.0f);
    return v;
  }

  static std::vector<int> railsOf(const std::vector<Slice>& slices) {
    std::vector<int> rails;
    for (const Slice& s : slices) {
      if (std::find(rails.begin(), rails.end(), s.rail) == rails.end()) rails.push_back(s.rail);
    }
    std::sort(rails.begin(), rails.end());
    return rails;
  }

  Options o;
  std::vector<RailInfo> infos;
  Metrics metrics;
  LoopbackAgreement agreement;
  std::unique_ptr<Scheduler> sched;
  std::vector<ScriptedRail*> scripted;  // owned by the engine
  bool rebuildsFail = false;
  int rebuildsMade = 0;
  uint64_t op = 0;
  std::unique_ptr<FailoverEngine> engine;  // last: its threads stop before the rig's state goes
};

// 32 MiB of floats: each rail's 16 MiB half runs as four 4 MiB chunks.
constexpr size_t kLarge = 8u << 20;

TEST(FailoverEngineTest, SplitsAnOperationOverEveryRail) {
  EngineRig rig;
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  Plan plan;
  auto ran = rig.copyOp(in, out, &plan);
  EXPECT_EQ(out, in);
  EXPECT_TRUE(plan.hot);
  EXPECT_EQ(EngineRig::railsOf(ran.done), (std::vector<int>{0, 1}));
  EXPECT_FALSE(ran.replayed);
  EXPECT_EQ(rig.agreement.rounds, 1);  // every operation ends with its round
  EXPECT_TRUE(rig.metrics.failovers.empty());
}

TEST(FailoverEngineTest, RailFailingMidSliceIsReplayedOnTheSurvivor) {
  EngineRig rig;
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.scripted[1]->breakAtExchange(2);  // its first chunk stands, the other three do not
  auto ran = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  EXPECT_TRUE(ran.replayed);
  EXPECT_EQ(rig.metrics.replayedSlices, 3u);  // only the chunks not done everywhere
  ASSERT_EQ(rig.metrics.failovers.size(), 1u);
  const FailoverEvent& ev = rig.metrics.failovers[0];
  EXPECT_EQ(ev.rail, "r1");
  EXPECT_EQ(ev.op, 0u);
  EXPECT_EQ(ev.reason, "error");  // seen here, no link event, no watchdog verdict
  EXPECT_EQ(ev.ranks, (std::vector<int>{0}));
  EXPECT_NE(ev.localError.find("scripted rail 1 broke"), std::string::npos) << ev.localError;
  EXPECT_EQ(rig.sched->alive(), (std::vector<bool>{true, false}));
  EXPECT_EQ(rig.engine->railState(1), "failed");
  EXPECT_FALSE(rig.metrics.rails["r1"].alive);

  // The next operation runs on the survivor alone, no replay.
  auto next = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  EXPECT_EQ(EngineRig::railsOf(next.done), (std::vector<int>{0}));
  EXPECT_FALSE(next.replayed);
}

TEST(FailoverEngineTest, LinkLossIsTheReasonAndPeersAreTold) {
  EngineRig rig;
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.engine->onLinkDown(1);  // the link watcher's event: aborts the rail and tells the peers
  EXPECT_EQ(rig.agreement.notices, (std::vector<int>{1}));
  auto ran = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  ASSERT_EQ(rig.metrics.failovers.size(), 1u);
  EXPECT_EQ(rig.metrics.failovers[0].reason, "carrier");
  EXPECT_EQ(EngineRig::railsOf(ran.done), (std::vector<int>{0}));
}

TEST(FailoverEngineTest, EveryRailGoneFailsWithOneErrorAndStaysUnusable) {
  EngineRig rig;
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.scripted[0]->breakNow();
  rig.scripted[1]->breakNow();
  try {
    rig.copyOp(in, out);
    FAIL() << "an operation with no rail left returned";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("operation 0 failed: no rail left to finish it on"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(rig.agreement.closed);  // peers waiting on this rank fail now, not later
  EXPECT_FALSE(rig.engine->failure().empty());
  try {
    rig.engine->checkUsable();
    FAIL() << "a failed engine accepted another operation";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("unusable after an earlier rail failure"),
              std::string::npos)
        << e.what();
  }
}

TEST(FailoverEngineTest, DrainAndRestoreApplyAtTheNextRound) {
  EngineRig rig;
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.engine->request(1, FailoverEngine::Request::kDrain);
  rig.copyOp(in, out);  // the round of this operation applies the drain
  EXPECT_EQ(out, in);
  EXPECT_EQ(rig.engine->railState(1), "drained");
  ASSERT_EQ(rig.metrics.drains.size(), 1u);
  EXPECT_EQ(rig.metrics.drains[0].reason, "operator");
  auto drained = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  EXPECT_EQ(EngineRig::railsOf(drained.done), (std::vector<int>{0}));
  EXPECT_TRUE(rig.metrics.failovers.empty());  // a drain is not a failure

  // The last rail in the split is never drained.
  rig.engine->request(0, FailoverEngine::Request::kDrain);
  rig.copyOp(in, out);
  EXPECT_EQ(rig.engine->railState(0), "healthy");

  rig.engine->request(1, FailoverEngine::Request::kRestore);
  rig.copyOp(in, out);
  EXPECT_EQ(rig.engine->railState(1), "healthy");
  ASSERT_EQ(rig.metrics.restores.size(), 1u);
  auto restored = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  EXPECT_EQ(EngineRig::railsOf(restored.done), (std::vector<int>{0, 1}));
}

// Runs operations until `done` holds (each operation is a boundary where re-admission moves
// on), at most `limit` of them.
template <typename Pred>
void runUntil(EngineRig& rig, Pred done, int limit = 100000) {
  const auto in = EngineRig::ramp(4096);
  std::vector<float> out;
  for (int i = 0; i < limit && !done(); ++i) {
    rig.copyOp(in, out);
    ASSERT_EQ(out, in);
  }
  ASSERT_TRUE(done()) << "not reached within " << limit << " operations";
}

TEST(FailoverEngineTest, HealedRailComesBackOnlyAfterItsProbePasses) {
  EngineRig rig(2, std::chrono::milliseconds(1));
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.scripted[1]->breakNow();
  rig.rebuildsFail = true;  // the rebuilt rail cannot reach its peer: the probe is not passed
  rig.copyOp(in, out);
  EXPECT_EQ(rig.sched->alive(), (std::vector<bool>{true, false}));
  runUntil(rig, [&] { return !rig.metrics.rejectedReadmissions.empty(); });
  EXPECT_EQ(rig.metrics.rejectedReadmissions[0].reason, "probe");
  EXPECT_NE(rig.metrics.rejectedReadmissions[0].localError.find("peer unreachable"),
            std::string::npos);
  EXPECT_TRUE(rig.metrics.readmissions.empty());
  EXPECT_EQ(rig.sched->alive(), (std::vector<bool>{true, false}));  // still out

  rig.rebuildsFail = false;  // healed: the next rebuild connects and its probe passes
  runUntil(rig, [&] { return !rig.metrics.readmissions.empty(); });
  EXPECT_EQ(rig.metrics.readmissions[0].rail, "r1");
  EXPECT_EQ(rig.metrics.readmissions[0].reason, "probe");
  EXPECT_EQ(rig.sched->alive(), (std::vector<bool>{true, true}));
  EXPECT_EQ(rig.engine->railState(1), "healthy");
  EXPECT_TRUE(rig.engine->reprobed(1));
  EXPECT_GE(rig.rebuildsMade, 2);
  EXPECT_EQ(rig.agreement.attached, (std::vector<int>{1}));  // its control connections
  auto back = rig.copyOp(in, out);
  EXPECT_EQ(out, in);
  EXPECT_EQ(EngineRig::railsOf(back.done), (std::vector<int>{0, 1}));
}

// A rail still faulty is probed again one hold-down after each refused probe, not ever later (it
// must carry its share within a second of its heal); only a rail that comes back and fails
// again waits twice as long (flap damping).
TEST(FailoverEngineTest, RefusedProbesKeepTheHoldDownReadmissionsDoubleIt) {
  EngineRig rig(2, std::chrono::milliseconds(1));
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.scripted[1]->breakNow();
  rig.rebuildsFail = true;
  rig.copyOp(in, out);
  runUntil(rig, [&] { return rig.metrics.rejectedReadmissions.size() >= 3; });
  EXPECT_EQ(rig.engine->holdDown(1), std::chrono::milliseconds(1));
  rig.rebuildsFail = false;
  runUntil(rig, [&] { return !rig.metrics.readmissions.empty(); });
  EXPECT_EQ(rig.engine->holdDown(1), std::chrono::milliseconds(2));
}

TEST(FailoverEngineTest, NoReadmissionWhileTheLinkIsDown) {
  EngineRig rig(2, std::chrono::milliseconds(1));
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.engine->onLinkDown(1);
  rig.copyOp(in, out);
  for (int i = 0; i < 50; ++i) rig.copyOp(in, out);
  EXPECT_EQ(rig.rebuildsMade, 0);  // a rail without carrier is never rebuilt
  EXPECT_EQ(rig.engine->railState(1), "failed");
  rig.engine->onLinkUp(1);
  runUntil(rig, [&] { return !rig.metrics.readmissions.empty(); });
  EXPECT_EQ(rig.sched->alive(), (std::vector<bool>{true, true}));
}

TEST(FailoverEngineTest, FailStopWithoutFailover) {
  EngineRig rig;
  rig.o.failover = false;  // the engine reads its options live (borrowed)
  const auto in = EngineRig::ramp(kLarge);
  std::vector<float> out;
  rig.scripted[1]->breakNow();
  EXPECT_THROW(rig.copyOp(in, out), RailError);
  EXPECT_THROW(rig.engine->checkUsable(), RailError);
  EXPECT_TRUE(rig.metrics.failovers.empty());
}

}  // namespace
}  // namespace nezha
