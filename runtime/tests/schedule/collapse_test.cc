// A rail that collapses (the design's gray failure: suddenly many times slower, link up) while
// each operation's part on it lags the others by less than the watchdog's window — which the
// watchdog therefore never fails over — must leave the split at the next agreement, not over
// the several the tuner's gain takes: every operation until then waits on it. A collapse the
// watchdog does see, and a rail that merely slows, keep the gain's damping.
#include <gtest/gtest.h>

#include <vector>

#include "schedule/scheduler.h"
#include "schedule/scheduler_sim.h"

namespace nezha {
namespace {

using CollapseTest = testing::SchedulerSim;
using testing::kFast;

constexpr int kInterval = 5;                  // SchedulerSim's NEZHA_TUNE_INTERVAL
constexpr size_t kMessageFloats = 128 << 10;  // 512 KiB: the NCCL plugin's message

TEST_F(CollapseTest, ARailFortyTimesSlowerUnderTheWatchdogLeavesTheSplitAtTheNextAgreement) {
  floats_ = kMessageFloats;
  for (int i = 0; i < 4 * kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast}});
  ASSERT_NEAR(share1(), 0.5, 0.01);
  // Gray from here on: its 256 KiB half takes ~105 ms, under the watchdog's 400 ms window. Over
  // the next two intervals only the one it turned gray in may wait on it.
  int waited = 0;
  for (int i = 0; i < 2 * kInterval; ++i) {
    const double before = overrun_;
    step({{1e-4, kFast}, {1e-4, kFast / 40}});
    // Rail 0's half takes ~2.7 ms; a wait on rail 1 of more than 2 ms is the split not yet
    // following the collapse.
    if (overrun_ - before > 0.002) ++waited;
  }
  EXPECT_LE(waited, kInterval) << "operations that waited on the collapsed rail";
  // Its ratio is where both rails finish together (1/41), not half or a gain step from it (and
  // 1/41 of 512 KiB earns no slice: it carries nothing until the starvation probe).
  EXPECT_NEAR(share1(), 1.0 / 41, 0.01);
}

TEST_F(CollapseTest, ACollapseTheWatchdogSeesIsLeftToItsSlowVerdict) {
  // 4 MiB operations: rail 1's 2 MiB half at 1/40 of the rate lags ~0.8 s, past the watchdog's
  // 400 ms window, so the watchdog fails it over as slow (and re-admission brings it back when
  // it heals); the tuner only takes its damped step.
  for (int i = 0; i < 4 * kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast}});
  ASSERT_NEAR(share1(), 0.5, 0.01);
  for (int i = 0; i <= kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast / 40}});
  const double gain = SchedulerSim::options().tuneGain;
  EXPECT_NEAR(share1(), (1 - gain) * 0.5 + gain / 41, 0.01);
}

TEST_F(CollapseTest, ARailThreeTimesSlowerMovesByTheGainStep) {
  for (int i = 0; i < 4 * kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast}});
  ASSERT_NEAR(share1(), 0.5, 0.01);
  for (int i = 0; i <= kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast / 3}});
  // One agreement on the slower timings: 0.4 x 0.5 + 0.6 x 0.25 (the gain, 0.6), not 0.25.
  const double gain = SchedulerSim::options().tuneGain;
  EXPECT_NEAR(share1(), (1 - gain) * 0.5 + gain * 0.25, 0.02);
  EXPECT_GT(share1(), 0.3);
}

}  // namespace
}  // namespace nezha
