// Load balancer arithmetic: the online update converges to the split where all rails finish
// together within 50 operations of a size (simulated rails with startup latency and noise),
// through the Scheduler's record/agree cycle too; static split and cold threshold from a probe.
#include "schedule/tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "schedule/scheduler.h"

namespace nezha {
namespace {

struct SimRail {
  double latency;    // s
  double bandwidth;  // bytes/s
};

// Split that equalizes a_i + alpha_i*S/B_i across rails.
std::vector<double> optimum(const std::vector<SimRail>& rails, double bytes) {
  double sumB = 0, sumAB = 0;
  for (auto& r : rails) {
    sumB += r.bandwidth;
    sumAB += r.latency * r.bandwidth;
  }
  double t = (bytes + sumAB) / sumB;
  std::vector<double> a;
  for (auto& r : rails) a.push_back((t - r.latency) * r.bandwidth / bytes);
  return a;
}

double makespan(const std::vector<SimRail>& rails, const std::vector<double>& ratios,
                double bytes) {
  double t = 0;
  for (size_t i = 0; i < rails.size(); ++i) {
    if (ratios[i] > 0) t = std::max(t, rails[i].latency + ratios[i] * bytes / rails[i].bandwidth);
  }
  return t;
}

TEST(TuneRatiosTest, ConvergesWithinFiftyOpsFromEqualSplit) {
  // 800 and 300 Mbit/s rails (the test bed's heterogeneous pair), 3% timing noise.
  std::vector<SimRail> rails{{200e-6, 100e6}, {300e-6, 37.5e6}};
  const double bytes = 64 << 20;
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(1.0, 0.03);
  std::vector<double> ratios{0.5, 0.5};
  const int interval = 5;
  std::vector<double> secs(2, 0), sent(2, 0);
  for (int op = 1; op <= 50; ++op) {
    for (size_t i = 0; i < 2; ++i) {
      secs[i] += (rails[i].latency + ratios[i] * bytes / rails[i].bandwidth) * noise(rng);
      sent[i] += ratios[i] * bytes;
    }
    if (op % interval == 0) {
      ratios = tuneRatios(ratios, sent, secs, 0.6);
      secs.assign(2, 0);
      sent.assign(2, 0);
    }
  }
  auto best = optimum(rails, bytes);
  EXPECT_NEAR(ratios[0], best[0], 0.02);
  EXPECT_NEAR(ratios[0] + ratios[1], 1.0, 1e-12);
  EXPECT_LT(makespan(rails, ratios, bytes), 1.03 * makespan(rails, best, bytes));
}

TEST(TuneRatiosTest, ThreeRailsWithLatencyDominatedSlowRail) {
  std::vector<SimRail> rails{{50e-6, 1e9}, {2e-3, 0.5e9}, {100e-6, 0.25e9}};
  const double bytes = 8 << 20;
  std::vector<double> ratios{1.0 / 3, 1.0 / 3, 1.0 / 3};
  for (int round = 0; round < 10; ++round) {  // 10 agreements = 50 ops at interval 5
    std::vector<double> secs, sent;
    for (size_t i = 0; i < 3; ++i) {
      secs.push_back(5 * (rails[i].latency + ratios[i] * bytes / rails[i].bandwidth));
      sent.push_back(5 * ratios[i] * bytes);
    }
    ratios = tuneRatios(ratios, sent, secs, 0.6);
  }
  auto best = optimum(rails, bytes);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(ratios[i], best[i], 0.01) << "rail " << i;
}

TEST(TuneRatiosTest, UnusedRailKeepsItsRatio) {
  auto r = tuneRatios({0.5, 0.3, 0.2}, {100, 100, 0}, {1, 2, 0}, 1.0);
  EXPECT_NEAR(r[2], 0.2, 1e-12);
  EXPECT_NEAR(r[0], 0.8 * 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(r[0] + r[1] + r[2], 1.0, 1e-12);
}

TEST(TuneRatiosTest, NoSamplesNoChange) {
  auto r = tuneRatios({0.4, 0.6}, {0, 0}, {0, 0}, 0.6);
  EXPECT_EQ(r, (std::vector<double>{0.4, 0.6}));
}

TEST(StaticSplitTest, ProportionalToBandwidth) {
  auto r = ratiosFromBandwidth({800, 300});
  EXPECT_NEAR(r[0], 800.0 / 1100, 1e-12);
  auto eq = ratiosFromBandwidth({0, 0});
  EXPECT_EQ(eq, (std::vector<double>{0.5, 0.5}));
}

TEST(ColdThresholdTest, FromProbe) {
  // Equal rails, 100 us latency, 100 MB/s: splitting wins once S/200MB/s saves more than
  // nothing... hot = 100us + S/200e6 < cold = 100us + S/100e6 for any S>0 -> minimum.
  EXPECT_EQ(autoColdThreshold({100e-6, 100e-6}, {100e6, 100e6}), 16u << 10);
  // A slow-starting second rail (2 ms) pays off only when S/100e6 - S/200e6 > 1.9 ms,
  // i.e. S > 380 KB -> 512 KiB.
  EXPECT_EQ(autoColdThreshold({100e-6, 2e-3}, {100e6, 100e6}), 512u << 10);
  // One rail: never split.
  EXPECT_EQ(autoColdThreshold({1e-4}, {1e8}), size_t(1) << 30);
  EXPECT_EQ(lowestLatencyRail({3e-4, 1e-4, 1e-4}), 1);
  EXPECT_EQ(highestBandwidthRail({1, 5, 5}), 1);
}

// The whole record -> agree -> apply cycle of the Scheduler on one rank with simulated timing:
// within 50 operations of one size the table entry reaches the optimum.
TEST(SchedulerTuningTest, TableEntryConvergesWithinFiftyOps) {
  Options o;
  o.rails = {{"r0", "lo", "tcp", ""}, {"r1", "lo", "tcp", ""}};
  o.policy = Policy::kAdaptive;
  o.coldThreshold = 1 << 20;
  o.tuneInterval = 5;
  o.minSliceBytes = 0;
  std::vector<SimRail> rails{{100e-6, 100e6}, {100e-6, 37.5e6}};
  // A misleading probe (rail 1 looks faster) so the online tuning has real work to do.
  ProbeResult probe{{1e-4, 1e-4}, {50e6, 80e6}};
  Scheduler s(o, probe, Table({"r0", "r1"}));
  EXPECT_EQ(s.observedBandwidth(1), 0.0);  // nothing agreed yet
  const size_t count = 16 << 20;           // float32 -> 64 MiB
  Plan last;
  for (uint64_t op = 0; op < 50; ++op) {
    if (s.agreementDue(op)) s.applyAgreed(s.pendingStats());
    last = s.plan(OpKind::kAllreduce, count, 4);
    ASSERT_TRUE(last.hot);
    std::vector<double> secs(2, 0);
    for (const Slice& sl : last.slices) {
      secs[sl.rail] = rails[sl.rail].latency + sl.count * 4.0 / rails[sl.rail].bandwidth;
    }
    s.record(last, secs);
  }
  const TableEntry* e = s.table().find(last.key);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ops, 50u);
  auto best = optimum(rails, count * 4.0);
  EXPECT_NEAR(e->ratios[0], best[0], 0.02);
  // The agreed timings also give each rail's rate as it is now, not as the probe said (re-
  // admission's slow floor compares a healed rail with these); a remeasure starts it over.
  EXPECT_NEAR(s.observedBandwidth(0), rails[0].bandwidth, 0.01 * rails[0].bandwidth);
  EXPECT_NEAR(s.observedBandwidth(1), rails[1].bandwidth, 0.01 * rails[1].bandwidth);
  // A healed rail is judged next to what the others carry now, not what their probe said: the
  // probe put rail 0 at 50 MB/s, the timings at 100.
  const std::vector<bool> both{true, true};
  EXPECT_NEAR(s.shareNextToOthers(1, 100e6, both), 0.5, 0.01);
  EXPECT_DOUBLE_EQ(s.shareNextToOthers(1, 100e6, {false, true}), 1.0);  // alone
  s.remeasure(1, 1e-4, 1e6);
  EXPECT_EQ(s.observedBandwidth(1), 0.0);
  // Rail 1's observed rate is gone with its remeasure: rail 0 is judged by its probe value now.
  EXPECT_NEAR(s.shareNextToOthers(0, 50e6, both), 50e6 / (50e6 + 1e6), 1e-9);
  // Below the threshold: cold start on the lowest-latency rail (tie -> rail 0), whole op.
  Plan cold = s.plan(OpKind::kAllreduce, 1000, 4);
  EXPECT_FALSE(cold.hot);
  ASSERT_EQ(cold.slices.size(), 1u);
  EXPECT_EQ(cold.slices[0].count, 1000u);
}

TEST(SchedulerPolicyTest, SingleAndStatic) {
  Options o;
  o.rails = {{"r0", "lo", "tcp", ""}, {"r1", "lo", "tcp", ""}};
  o.minSliceBytes = 0;
  ProbeResult probe{{2e-4, 1e-4}, {30e6, 90e6}};
  o.policy = Policy::kSingle;
  Scheduler single(o, probe, Table({"r0", "r1"}));
  Plan p = single.plan(OpKind::kAllgather, 1 << 20, 16);
  ASSERT_EQ(p.slices.size(), 1u);
  EXPECT_EQ(p.slices[0].rail, 1);  // highest bandwidth
  o.policy = Policy::kStatic;
  Scheduler fixed(o, probe, Table({"r0", "r1"}));
  Plan q = fixed.plan(OpKind::kAllreduce, 1000, 4);
  ASSERT_EQ(q.slices.size(), 2u);
  EXPECT_EQ(q.slices[0].count, 250u);
  EXPECT_EQ(q.slices[1].count, 750u);
  EXPECT_FALSE(fixed.agreementDue(5));  // static never tunes
}

// Cold path: a probe's latency gap of tens of microseconds between rails is host noise; the
// faster rail by bandwidth keeps small operations unless the other is clearly quicker.
TEST(SchedulerColdPathTest, NoiseSizedLatencyGapDoesNotBeatBandwidth) {
  Options o;
  o.rails = {{"r0", "lo", "tcp", ""}, {"r1", "lo", "tcp", ""}, {"r2", "lo", "tcp", ""}};
  o.policy = Policy::kAdaptive;
  o.coldThreshold = 1 << 20;
  // 800/300-like rails; the bench's probe once measured the fast one at 82 us, the slow at 53.
  ProbeResult noisy{{82e-6, 53e-6, 60e-6}, {66e6, 24.7e6, 24e6}};
  Scheduler s(o, noisy, Table({"r0", "r1", "r2"}));
  for (size_t bytes : {size_t(1024), size_t(4096), size_t(65536)}) {
    Plan p = s.plan(OpKind::kAllreduce, bytes / 4, 4);
    ASSERT_EQ(p.slices.size(), 1u);
    EXPECT_EQ(p.slices[0].rail, 0) << bytes;
  }
  s.setAlive({false, true, true});  // without it, the faster of the rest by bandwidth
  EXPECT_EQ(s.plan(OpKind::kAllreduce, 256, 4).slices[0].rail, 1);
  // A real gap (an RDMA-like 3 us next to TCP's 50 us) still wins at small sizes, and loses
  // once bytes / bandwidth dominate.
  ProbeResult real{{50e-6, 3e-6, 50e-6}, {66e6, 24.7e6, 24e6}};
  Scheduler r(o, real, Table({"r0", "r1", "r2"}));
  EXPECT_EQ(r.plan(OpKind::kAllreduce, 256, 4).slices[0].rail, 1);
  EXPECT_EQ(r.plan(OpKind::kAllreduce, 64 << 10, 4).slices[0].rail, 0);
}

// Above the cold threshold but below two minimum slices, an operation can only run whole: it runs
// cold (no table entry, so no timing agreement is ever due for it); from two slices up it splits
// and is tabled.
TEST(SchedulerColdPathTest, UnsplittableSizesRunColdWithoutATableEntry) {
  Options o;
  o.rails = {{"r0", "lo", "tcp", ""}, {"r1", "lo", "tcp", ""}};
  o.policy = Policy::kAdaptive;
  o.coldThreshold = 16 << 10;
  o.minSliceBytes = 32 << 10;
  // r1 has the lower prediction at 32 KiB; the split's biggest weight would be r0's.
  ProbeResult probe{{1000e-6, 30e-6}, {70e6, 60e6}};
  Scheduler s(o, probe, Table({"r0", "r1"}));
  for (size_t bytes : {size_t(16) << 10, size_t(32) << 10, (size_t(64) << 10) - 4}) {
    Plan p = s.plan(OpKind::kAllreduce, bytes / 4, 4);
    ASSERT_EQ(p.slices.size(), 1u) << bytes;
    EXPECT_EQ(p.slices[0].rail, 1) << bytes;
    EXPECT_FALSE(p.tabled) << bytes;
    EXPECT_FALSE(p.hot) << bytes;
    s.record(p, {0.0, 1e-3});
  }
  EXPECT_TRUE(s.pendingStats().empty());  // nothing to agree on
  Plan split = s.plan(OpKind::kAllreduce, (128 << 10) / 4, 4);
  EXPECT_TRUE(split.tabled);
  EXPECT_EQ(split.slices.size(), 2u);
  s.record(split, {1e-3, 1e-3});
  EXPECT_FALSE(s.pendingStats().empty());
}

}  // namespace
}  // namespace nezha
