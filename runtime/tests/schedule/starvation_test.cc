// A rail the split leaves out must be able to come back. With NEZHA_MIN_SLICE_BYTES > 0 a rail
// whose share x the operation falls below the minimum gets no slice, hence no timing, hence no
// tuner update: before the starvation probe, a rail tuned down while it was gray stayed at split
// 0 forever (found on kind: re-admitted, "healthy", split 0.0 for minutes). These tests drive
// the Scheduler's record -> agree -> apply cycle on one rank with simulated rail timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "schedule/scheduler.h"
#include "schedule/scheduler_sim.h"

namespace nezha {
namespace {

using StarvationTest = testing::SchedulerSim;
using testing::kFast;
using testing::kFloats;
using testing::kGray;

TEST_F(StarvationTest, ReadmittedRailStartsFromItsMeasuredShareNotItsTunedDownOne) {
  ASSERT_GE(starveRail1(), 0);
  // Re-admission measured it as fast as rail 0 runs now: it starts at half, not at ~0.
  s_.remeasure(1, 1e-4, kFast);
  EXPECT_NEAR(share1(), 0.5, 0.01);
  EXPECT_GT(step({{1e-4, kFast}, {1e-4, kFast}}), size_t(1) << 20);
  // A rail that comes back slow still starts small (below a fifth here).
  s_.remeasure(1, 1e-4, kFast / 5);
  EXPECT_LT(share1(), 0.2);
  EXPECT_GT(share1(), 0.1);
}

TEST_F(StarvationTest, StarvedLiveRailIsProbedAndWinsItsShareBack) {
  ASSERT_GE(starveRail1(), 0);
  // Healed without a failover (a gray spell under the slow detector's bar): only a probe slice
  // can show the tuner that. First probe within kFirstProbeWait + 1 agreements of starving, and
  // the rail carries its half again within a few more.
  int ops = 0;
  while (share1() < 0.45 && ops < 400) {
    step({{1e-4, kFast}, {1e-4, kFast}});
    ++ops;
  }
  EXPECT_GE(share1(), 0.45) << "rail 1 never won its share back";
  EXPECT_LE(ops, static_cast<int>((kMaxProbeWait + 4) * 5)) << "took " << ops << " operations";
}

TEST_F(StarvationTest, ProbesOfARailThatStaysSlowBackOff) {
  ASSERT_GE(starveRail1(), 0);
  busy_ = overrun_ = 0;
  // 2,000 more gray operations (400 agreements) on a rail 1000x slower: the first probe comes
  // after 4 agreements; it ran ~9x past the other rail, so the next waits ~175 agreements (5 %
  // of the job's time), and so on.
  int carried = 0, probes = 0;
  bool inProbe = false;
  for (int i = 0; i < 2000; ++i) {
    const bool r1 = step({{1e-4, kFast}, {1e-4, kGray}}) > 0;
    carried += r1;
    if (r1 && !inProbe) ++probes;
    inProbe = r1;
  }
  EXPECT_GE(probes, 2);  // it keeps being tried: a later heal is noticed
  EXPECT_LE(probes, 4);
  EXPECT_LE(carried, probes * 5);  // one agreement interval per probe
  // What the probes cost: the first one (which learns how slow the rail is) plus at most
  // kStarvedProbeBudget of the time after it.
  EXPECT_LE(overrun_ / busy_, 0.08) << overrun_ << " s of " << busy_ << " s";
  EXPECT_GT(overrun_, 0.0);
}

TEST_F(StarvationTest, NoMinimumSliceNoProbe) {
  Options o = options();
  o.minSliceBytes = 0;
  Scheduler s(o, ProbeResult{{1e-4, 1e-4}, {kFast, kFast}}, Table({"r0", "r1"}));
  for (uint64_t op = 0; op < 100; ++op) {
    if (s.agreementDue(op)) s.applyAgreed(s.pendingStats());
    Plan p = s.plan(OpKind::kAllreduce, kFloats, 4);
    // Every positive share earns a slice, so the rail is always timed and never starves.
    ASSERT_EQ(p.slices.size(), 2u) << "op " << op;
    std::vector<double> secs{1e-4 + p.slices[0].count * 4.0 / kFast,
                             1e-4 + p.slices[1].count * 4.0 / kGray};
    s.record(p, secs);
  }
}

// A gray rail behind a token bucket (the test bed's TBF, a shaper, a switch buffer): after it sat
// idle, its first bytes leave at line rate, so the probe interval times it several times faster
// than it runs. The tuner's gain then walks its share down over more agreements instead of
// leaving it out at once, and the job waits on it in each: the probe must cost what the budget
// allows, tail included, and bytes from a probe's tail are not the rail winning a share back.
TEST_F(StarvationTest, AProbedRailBehindATokenBucketIsLeftOutWithinTheBudget) {
  constexpr size_t kChunkFloats = 128 << 10;  // 512 KiB: the NCCL plugin's chunk, bucket 2^19
  constexpr double kBurst = 64 << 10, kSlow = kFast / 40;
  Options o = options();
  Scheduler s(o, ProbeResult{{1e-4, 1e-4}, {kFast, kFast}}, Table({"r0", "r1"}));
  double tokens = kBurst, busy = 0, overrun = 0;
  int probes = 0;
  bool carrying = false;
  for (uint64_t op = 0; op < 3000; ++op) {
    if (s.agreementDue(op)) s.applyAgreed(s.pendingStats());
    Plan p = s.plan(OpKind::kAllreduce, kChunkFloats, 4);
    std::vector<double> secs(2, 0);
    for (const Slice& sl : p.slices) {
      const double bytes = sl.count * 4.0;
      if (sl.rail == 0) {
        secs[0] = 1e-4 + bytes / kFast;
      } else {
        const double fast = std::min(bytes, tokens);  // what the bucket lets through at once
        tokens -= fast;
        secs[1] = 1e-4 + fast / kFast + (bytes - fast) / kSlow;
      }
    }
    s.record(p, secs);
    const double took = std::max(secs[0], secs[1]);
    tokens = std::min(kBurst, tokens + took * kSlow);
    const bool r1 = secs[1] > 0;
    if (op >= 500) {  // after the split has learned the rail is gray
      busy += took;
      overrun += std::max(0.0, secs[1] - secs[0]);
      probes += r1 && !carrying;
    }
    carrying = r1;
  }
  EXPECT_GE(probes, 1);  // it keeps being tried: a later heal is noticed
  EXPECT_LE(overrun / busy, 0.08) << overrun << " s of " << busy << " s, " << probes << " probes";
}

}  // namespace
}  // namespace nezha
