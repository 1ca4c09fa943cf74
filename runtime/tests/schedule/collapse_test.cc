// A rail that collapses (the design's gray failure: suddenly many times slower, link up) must
// leave the split at the next agreement, not over the several the tuner's gain takes: every
// operation until then waits on it. A rail that merely slows keeps the gain's damping.
#include <gtest/gtest.h>

#include <vector>

#include "schedule/scheduler.h"
#include "schedule/scheduler_sim.h"

namespace nezha {
namespace {

using CollapseTest = testing::SchedulerSim;
using testing::kFast;
using testing::kFloats;

constexpr int kInterval = 5;  // SchedulerSim's NEZHA_TUNE_INTERVAL

TEST_F(CollapseTest, ARailFortyTimesSlowerGetsItsFinishTogetherShareAtTheNextAgreement) {
  for (int i = 0; i < 4 * kInterval; ++i) step({{1e-4, kFast}, {1e-4, kFast}});
  ASSERT_NEAR(share1(), 0.5, 0.01);
  // Gray from here on. Only the interval it turned gray in may wait on it.
  int waited = 0;
  for (int i = 0; i < 10 * kInterval; ++i) {
    const double before = overrun_;
    step({{1e-4, kFast}, {1e-4, kFast / 40}});
    // Rail 0's part of half the operation takes ~21 ms; a wait on rail 1 of more than 10 ms is
    // the split not yet following the collapse.
    if (overrun_ - before > 0.01) ++waited;
  }
  EXPECT_LE(waited, kInterval) << "operations that waited on the collapsed rail";
  // Its share is where both rails finish together (1/41), not half or a gain step from it.
  EXPECT_NEAR(share1(), 1.0 / 41, 0.01);
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
