// Round-free small operations (Options::roundFreeBytes, failover/failover_engine.cc): small cold
// operations skip the per-operation agreement round while every rail is alive, and a rail
// failure still costs no correctness. The paths tested: the fast path itself; a peer one
// operation behind (it failed a round-free operation its peer finished, so the peer redoes that
// one with it and then runs its own again); a rail set change between operations; losing every
// rail. In-process fault injection as in failover_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::runRanks;

auto coldSmall = [](Options& o) {
  o.coldThreshold = size_t(1) << 20;  // every op here is cold: whole on one rail
  o.ioTimeout = std::chrono::milliseconds(10000);
  o.progressFloor = std::chrono::milliseconds(500);
  o.readmitHoldDown = std::chrono::milliseconds(0);  // a failed rail stays out
};

int32_t input(int r, int i, size_t j) { return (r + 1) * static_cast<int32_t>(j % 7 + 1) + i; }
int32_t expectedSum(int n, int i, size_t j) {
  return static_cast<int32_t>(j % 7 + 1) * n * (n + 1) / 2 + n * i;
}

// Operation i of rank r: in-place allreduce, out-of-place allreduce, allgather or
// reduce_scatter of `count` int32 by i % 4. Returns the number of wrong elements.
long runOp(Communicator& c, int r, int n, int i, size_t count) {
  long wrong = 0;
  switch (i % 4) {
    case 0: {
      std::vector<int32_t> buf(count);
      for (size_t j = 0; j < count; ++j) buf[j] = input(r, i, j);
      c.allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong += buf[j] != expectedSum(n, i, j);
      break;
    }
    case 1: {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t j = 0; j < count; ++j) in[j] = input(r, i, j);
      c.allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong += out[j] != expectedSum(n, i, j);
      for (size_t j = 0; j < count; ++j) wrong += in[j] != input(r, i, j);  // input untouched
      break;
    }
    case 2: {
      std::vector<int32_t> mine(count), all(count * n, -1);
      for (size_t j = 0; j < count; ++j) mine[j] = input(r, i, j);
      c.allgather(mine.data(), all.data(), count, DataType::kInt32);
      for (int p = 0; p < n; ++p) {
        for (size_t j = 0; j < count; ++j) wrong += all[p * count + j] != input(p, i, j);
      }
      break;
    }
    default: {
      std::vector<int32_t> in(count * n), out(count, -1);
      for (size_t j = 0; j < count * n; ++j) in[j] = input(r, i, j);
      c.reduceScatter(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong += out[j] != expectedSum(n, i, r * count + j);
      break;
    }
  }
  return wrong;
}

// The rail the job's cold operations run on (after at least one operation).
std::string coldRailOf(const Communicator& c) {
  for (const auto& [name, share] : c.lastReport().split) {
    if (share == 1.0) return name;
  }
  return "";
}

int railIndex(const Communicator& c, const std::string& name) {
  const auto rails = c.rails();
  for (size_t i = 0; i < rails.size(); ++i) {
    if (rails[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

TEST(RoundFreeTest, SmallColdOpsSkipTheRoundAndStayExact) {
  const int n = 3, ops = 64;
  auto comms = testing::makeJob(jobOptions(n, 2, coldSmall));
  std::vector<long> wrong(n, 0);
  runRanks(n, [&](int r) {
    for (int i = 0; i < ops; ++i) wrong[r] += runOp(*comms[r], r, n, i, 1000 + i);
  });
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  for (int r = 0; r < n; ++r) {
    const Metrics& m = comms[r]->metrics();
    // Every 16th operation holds its round; the others skip it.
    EXPECT_EQ(m.roundFreeOps, comms[0]->metrics().roundFreeOps) << "rank " << r;
    EXPECT_GE(m.roundFreeOps, static_cast<uint64_t>(ops - ops / 16 - 1)) << "rank " << r;
    EXPECT_EQ(m.keptRedos, 0u);
    EXPECT_TRUE(m.failovers.empty());
  }
}

TEST(RoundFreeTest, OffMeansARoundAfterEveryOp) {
  const int n = 2;
  auto comms = testing::makeJob(jobOptions(n, 2, [](Options& o) {
    coldSmall(o);
    o.roundFreeBytes = 0;
  }));
  std::vector<long> wrong(n, 0);
  runRanks(n, [&](int r) {
    for (int i = 0; i < 20; ++i) wrong[r] += runOp(*comms[r], r, n, i, 500);
  });
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  for (auto& c : comms) EXPECT_EQ(c->metrics().roundFreeOps, 0u);
}

// Rank 1 enters operation `cutAt` alone and loses the cold rail there; rank 0 is held back until
// then. Whether rank 1's data got out before the cut decides which path runs: if it did, rank 0
// finishes that operation without a round, fails the next one on the dead rail, and redoes the
// kept one with rank 1 (a peer on an older operation); if not, both fail the same operation.
// Both must give exact results and one agreed failover. Returns how often the redo path ran.
int peerBehindTrial(int cutAt, int ops, std::vector<long>& wrong) {
  const int n = 2;
  auto comms = testing::makeJob(jobOptions(n, 2, coldSmall));
  std::atomic<bool> rank1Entering{false}, released{false};
  std::atomic<int> cutRail{-1};
  std::thread injector([&] {
    while (!rank1Entering.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    // Give rank 1's exchange a moment to send (either outcome is correct; this only makes the
    // interesting one likely).
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    comms[1]->abortRail(cutRail.load());
    released = true;
  });
  runRanks(n, [&](int r) {
    for (int i = 0; i < ops; ++i) {
      if (i == cutAt) {
        if (r == 1) {
          cutRail = railIndex(*comms[1], coldRailOf(*comms[1]));
          rank1Entering = true;
        } else {
          while (!released.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      wrong[r] += runOp(*comms[r], r, n, i % 2, 2000);  // in and out of place allreduce
    }
  });
  injector.join();
  const std::string cut = comms[0]->rails()[cutRail.load()].name;
  for (int r = 0; r < n; ++r) {
    const Metrics& m = comms[r]->metrics();
    EXPECT_EQ(m.failovers.size(), 1u) << "rank " << r;
    if (m.failovers.size() != 1) continue;
    EXPECT_EQ(m.failovers[0].rail, cut);
    EXPECT_EQ(m.failovers[0].op, comms[0]->metrics().failovers[0].op)
        << "ranks must agree on the operation";
    EXPECT_EQ(m.failovers[0].op, static_cast<uint64_t>(cutAt));
    EXPECT_FALSE(m.rails.at(cut).alive);
  }
  // Only rank 0 can be ahead here.
  EXPECT_EQ(comms[1]->metrics().keptRedos, 0u);
  return static_cast<int>(comms[0]->metrics().keptRedos);
}

TEST(RoundFreeTest, PeerOneOpBehindGetsTheKeptOpRedone) {
  std::vector<long> wrong(2, 0);
  int redone = 0;
  const int trials = 4;
  for (int t = 0; t < trials; ++t) redone += peerBehindTrial(5 + t, 14, wrong);
  EXPECT_EQ(wrong, std::vector<long>(2, 0));
  std::cout << "[ info ] the peer-behind path ran in " << redone << " of " << trials << " trials\n";
}

// Every rank loses the cold rail between two operations: the next one fails everywhere at once,
// one round moves the rail set on, and round-free operations resume on the surviving rail while
// the cut one stays out (here for good: hold-down 0), every result exact.
TEST(RoundFreeTest, RailSetChangeBetweenOps) {
  const int n = 3;
  auto comms = testing::makeJob(jobOptions(n, 2, coldSmall));
  std::atomic<int> arrived{0};
  std::atomic<bool> cutDone{false};
  std::vector<long> wrong(n, 0);
  std::vector<uint64_t> roundFreeBefore(n, 0);
  std::string cut;
  runRanks(n, [&](int r) {
    for (int i = 0; i < 30; ++i) {
      if (i == 10) {
        roundFreeBefore[r] = comms[r]->metrics().roundFreeOps;
        if (++arrived == n) {
          cut = coldRailOf(*comms[0]);
          for (auto& c : comms) c->abortRail(railIndex(*c, cut));
          cutDone = true;
        }
        while (!cutDone.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      wrong[r] += runOp(*comms[r], r, n, i, 800);
    }
  });
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  for (int r = 0; r < n; ++r) {
    const Metrics& m = comms[r]->metrics();
    ASSERT_EQ(m.failovers.size(), 1u) << "rank " << r;
    EXPECT_EQ(m.failovers[0].rail, cut);
    // The first operation that uses the cut rail fails (sizes differ, so the ops right after
    // the cut may run on the other rail, still round-free: the set has not changed yet).
    EXPECT_EQ(m.failovers[0].op, comms[0]->metrics().failovers[0].op) << "rank " << r;
    EXPECT_GE(m.failovers[0].op, 10u);
    // 20 operations from the cut on: the failed one, and every 16th, hold their rounds.
    EXPECT_GE(m.roundFreeOps, roundFreeBefore[r] + 10)
        << "a rail is out: the survivor's small operations skip their rounds again";
    EXPECT_GT(roundFreeBefore[r], 0u);
  }
}

// Both rails lost (one on each rank) while small round-free operations run: the same clear
// error family on every rank, not a hang and not a wrong result.
TEST(RoundFreeTest, AllRailsCutGivesTheSameClearError) {
  const int n = 2;
  auto comms = testing::makeJob(jobOptions(n, 2, coldSmall));
  std::vector<std::string> errors(n);
  std::vector<long> wrong(n, 0);
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 20) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[0]->abortRail(0);
    comms[1]->abortRail(1);
  });
  runRanks(n, [&](int r) {
    try {
      for (int i = 0; i < 1000000; ++i) {
        wrong[r] += runOp(*comms[r], r, n, i, 256);
        if (r == 0) done++;
      }
    } catch (const RailError& e) {
      errors[r] = e.what();
    }
  });
  injector.join();
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[r].find("no rail left to finish it on"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

}  // namespace
}  // namespace nezha
