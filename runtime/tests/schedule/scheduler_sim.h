// A Scheduler driven through its record -> agree -> apply cycle on one rank with simulated rail
// timings: two rails, an allreduce of floats_ (4 MiB unless a test sets it) per operation, each
// rail's time from its latency and bandwidth. Shared by the tests of how the split follows rails
// that slow down and heal.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "schedule/scheduler.h"

namespace nezha::testing {

struct SimRail {
  double latency;    // s
  double bandwidth;  // bytes/s
};

constexpr size_t kFloats = 1 << 20;  // 4 MiB of float32: bucket 2^22
constexpr double kFast = 100e6, kGray = 0.1e6;

class SchedulerSim : public ::testing::Test {
 protected:
  SchedulerSim() : s_(options(), ProbeResult{{1e-4, 1e-4}, {kFast, kFast}}, Table({"r0", "r1"})) {}

  static Options options() {
    Options o;
    o.rails = {{"r0", "lo", "tcp", ""}, {"r1", "lo", "tcp", ""}};
    o.policy = Policy::kAdaptive;
    o.coldThreshold = 1 << 16;
    o.tuneInterval = 5;
    o.minSliceBytes = 32 << 10;  // the default
    return o;
  }

  // Runs one operation with rail i at rails[i]; returns the bytes rail 1 carried.
  size_t step(const std::vector<SimRail>& rails) {
    if (s_.agreementDue(op_)) s_.applyAgreed(s_.pendingStats());
    ++op_;
    Plan p = s_.plan(OpKind::kAllreduce, floats_, 4);
    EXPECT_TRUE(p.tabled);
    key_ = p.key;
    std::vector<double> secs(2, 0);
    size_t r1 = 0;
    for (const Slice& sl : p.slices) {
      secs[sl.rail] = rails[sl.rail].latency + sl.count * 4.0 / rails[sl.rail].bandwidth;
      if (sl.rail == 1) r1 += sl.count * 4;
    }
    s_.record(p, secs);
    // The operation ends with its slowest rail; what rail 1 ran past rail 0 is the probe's cost.
    busy_ += std::max(secs[0], secs[1]);
    overrun_ += std::max(0.0, secs[1] - secs[0]);
    return r1;
  }

  double share1() const { return s_.table().find(key_)->ratios[1]; }

  // Gray rail 1 until the split leaves it out; returns the operations it took.
  int starveRail1() {
    for (int i = 0; i < 200; ++i) {
      if (step({{1e-4, kFast}, {1e-4, kGray}}) == 0 && share1() * floats_ * 4 < (32 << 10)) {
        return i;
      }
    }
    ADD_FAILURE() << "rail 1 was never left out of the split (share " << share1() << ")";
    return -1;
  }

  Scheduler s_;
  size_t floats_ = kFloats;  // float32 elements per operation
  uint64_t op_ = 0;
  TableKey key_{OpKind::kAllreduce, 0, 0};
  double busy_ = 0, overrun_ = 0;  // simulated seconds
};

}  // namespace nezha::testing
