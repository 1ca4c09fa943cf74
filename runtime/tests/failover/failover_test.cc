// Failover (NEZHA_FAILOVER=replay) with in-process fault injection: abortRail() shuts a rail's
// connections on one rank while collectives run. Every operation must still return the exact
// result on every rank, all ranks must record the same failover (operation, rail), later
// operations must avoid the failed rail, and losing every rail must end in a clear RailError.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::runRanks;

auto hotEqualSplit = [](Options& o) {
  o.coldThreshold = 0;  // every op is split across both rails
  o.minSliceBytes = 0;
  o.probeBytes = 0;  // equal rails: each carries half
  o.ioTimeout = std::chrono::milliseconds(10000);
  o.progressFloor = std::chrono::milliseconds(500);
  o.readmitHoldDown = std::chrono::milliseconds(0);  // a failed rail stays out
};

// Input of rank r in operation i (small integers: exact in every dtype) and the allreduce sum.
int32_t input(int r, int i, size_t j) { return (r + 1) * static_cast<int32_t>(j % 7 + 1) + i; }
int32_t expectedSum(int n, int i, size_t j) {
  return static_cast<int32_t>(j % 7 + 1) * n * (n + 1) / 2 + n * i;
}

// Runs `ops` in-place allreduces of `count` int32 on every rank; after `cutAfter` operations
// have completed on rank `cutRanks[0]`, each rank in cutRanks aborts `rail`. Returns per-rank
// the number of wrong elements seen (must be 0).
std::vector<long> allreduceUnderCut(std::vector<std::unique_ptr<Communicator>>& comms, int ops,
                                    size_t count, const std::vector<int>& cutRanks, int rail,
                                    int cutAfter) {
  const int n = static_cast<int>(comms.size());
  std::vector<long> wrong(n, 0);
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < cutAfter) std::this_thread::sleep_for(std::chrono::microseconds(50));
    for (int r : cutRanks) comms[r]->abortRail(rail);
  });
  runRanks(n, [&](int r) {
    std::vector<int32_t> buf(count);
    for (int i = 0; i < ops; ++i) {
      for (size_t j = 0; j < count; ++j) buf[j] = input(r, i, j);
      comms[r]->allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong[r] += buf[j] != expectedSum(n, i, j);
      if (r == cutRanks[0]) done++;
    }
  });
  injector.join();
  return wrong;
}

void expectOneAgreedFailover(std::vector<std::unique_ptr<Communicator>>& comms,
                             const std::string& rail) {
  const uint64_t op =
      comms[0]->metrics().failovers.empty() ? 0 : comms[0]->metrics().failovers[0].op;
  for (size_t r = 0; r < comms.size(); ++r) {
    const Metrics& m = comms[r]->metrics();
    ASSERT_EQ(m.failovers.size(), 1u) << "rank " << r;
    EXPECT_EQ(m.failovers[0].rail, rail) << "rank " << r;
    EXPECT_EQ(m.failovers[0].op, op) << "rank " << r << ": ranks must agree on the operation";
    EXPECT_GE(m.failovers[0].stallSeconds, 0.0);
    EXPECT_FALSE(m.failovers[0].ranks.empty()) << "rank " << r;
    EXPECT_EQ(m.failovers[0].ranks, comms[0]->metrics().failovers[0].ranks) << "rank " << r;
    EXPECT_FALSE(m.rails.at(rail).alive) << "rank " << r;
  }
}

TEST(FailoverTest, OneRankCutsARailMidAllreduceEveryResultExact) {
  auto comms = testing::makeJob(jobOptions(2, 2, hotEqualSplit));
  auto wrong = allreduceUnderCut(comms, 30, 1 << 18, {1}, 1, 5);
  EXPECT_EQ(wrong, std::vector<long>(2, 0));
  expectOneAgreedFailover(comms, "r1");
  // Later operations run on the survivor only.
  for (auto& c : comms) {
    EXPECT_EQ(c->lastReport().split.at("r1"), 0.0);
    EXPECT_EQ(c->lastReport().split.at("r0"), 1.0);
  }
}

// A rank that reaches an operation long after its peers (computing, writing a checkpoint) is not
// a dead rail: the waiting ranks ask it over the control mesh when their deadline expires.
TEST(FailoverTest, LateRankIsNotTakenForADeadRail) {
  auto comms = testing::makeJob(jobOptions(2, 2, [](Options& o) {
    hotEqualSplit(o);
    o.probeBytes = 1 << 20;  // measured loopback speed: deadlines come down to the floor
    o.progressFloor = std::chrono::milliseconds(100);
  }));
  std::vector<long> wrong(2, 0);
  runRanks(2, [&](int r) {
    std::vector<int32_t> buf(1 << 16);
    for (int i = 0; i < 4; ++i) {
      if (r == 1 && i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      for (size_t j = 0; j < buf.size(); ++j) buf[j] = input(r, i, j);
      comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < buf.size(); ++j) wrong[r] += buf[j] != expectedSum(2, i, j);
    }
  });
  EXPECT_EQ(wrong, std::vector<long>(2, 0));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(comms[r]->metrics().failovers.empty())
        << "rank " << r << ": " << comms[r]->metrics().failovers[0].localError;
  }
}

// 24 MiB ops run as 4 MiB chunks per rail; a cut mid-op redoes only the chunks not finished on
// every rank, and the mix of kept and redone chunks must still be exact everywhere.
TEST(FailoverTest, ChunkedLargeOpsCutMidwayStayExact) {
  auto comms = testing::makeJob(jobOptions(2, 2, hotEqualSplit));
  auto wrong = allreduceUnderCut(comms, 6, 6 << 20, {0}, 0, 2);
  EXPECT_EQ(wrong, std::vector<long>(2, 0));
  expectOneAgreedFailover(comms, comms[0]->rails()[0].name);
  EXPECT_GT(comms[0]->metrics().replayedSlices, 0u);
}

TEST(FailoverTest, SameRailCutOnAllRanksThreeRanks) {
  auto comms = testing::makeJob(jobOptions(3, 2, hotEqualSplit));
  auto wrong = allreduceUnderCut(comms, 20, 100000, {0, 1, 2}, 0, 3);
  EXPECT_EQ(wrong, std::vector<long>(3, 0));
  expectOneAgreedFailover(comms, "r0");
}

// The failed slice of an in-place op is replayed from the preserved input even when the cut
// lands mid-operation: many short ops with the cut racing them.
TEST(FailoverTest, CutRacingManySmallSplitOpsThreeRails) {
  auto comms = testing::makeJob(jobOptions(2, 3, hotEqualSplit));
  auto wrong = allreduceUnderCut(comms, 200, 3000, {0}, 2, 37);
  EXPECT_EQ(wrong, std::vector<long>(2, 0));
  expectOneAgreedFailover(comms, "r2");
}

// Other collectives replay too (out of place and in place), with exact results.
TEST(FailoverTest, BroadcastAllgatherReduceScatterSurviveACut) {
  auto comms = testing::makeJob(jobOptions(3, 2, hotEqualSplit));
  const int n = 3;
  const size_t count = 60000;
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 4) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[2]->abortRail(1);
  });
  std::vector<long> wrong(n, 0);
  runRanks(n, [&](int r) {
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> b(count);
      for (size_t j = 0; j < count; ++j) b[j] = r == 1 ? input(1, i, j) : -1;
      comms[r]->broadcast(b.data(), count, DataType::kInt32, 1);
      for (size_t j = 0; j < count; ++j) wrong[r] += b[j] != input(1, i, j);

      std::vector<int32_t> mine(count), all(count * n);
      for (size_t j = 0; j < count; ++j) mine[j] = input(r, i, j);
      comms[r]->allgather(mine.data(), all.data(), count, DataType::kInt32);
      for (int p = 0; p < n; ++p) {
        for (size_t j = 0; j < count; ++j) wrong[r] += all[p * count + j] != input(p, i, j);
      }

      std::vector<int32_t> in(count * n), out(count);
      for (size_t j = 0; j < count * n; ++j) in[j] = input(r, i, j);
      comms[r]->reduceScatter(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong[r] += out[j] != expectedSum(n, i, r * count + j);
      comms[r]->barrier();
      if (r == 2) done++;
    }
  });
  injector.join();
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  expectOneAgreedFailover(comms, "r1");
}

// Alltoall(v) replays like the others: a rail cut mid-operation on one rank costs no element,
// with uneven messages (each rail carries its share of every message, the failed share is
// redone on the survivor) and in place.
TEST(FailoverTest, AlltoallSurvivesACut) {
  auto comms = testing::makeJob(jobOptions(3, 2, hotEqualSplit));
  const size_t n = 3;
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 4) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[2]->abortRail(1);
  });
  std::vector<long> wrong(n, 0);
  auto amount = [](size_t from, size_t to) { return (from + 1) * 40000 + to * 7001; };
  runRanks(static_cast<int>(n), [&](int rank) {
    const size_t r = static_cast<size_t>(rank);
    for (int i = 0; i < 12; ++i) {
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t st = 0, rt = 0;
      for (size_t q = 0; q < n; ++q) {
        sc[q] = amount(r, q);
        sd[q] = st;
        st += sc[q];
        rc[q] = amount(q, r);
        rd[q] = rt;
        rt += rc[q];
      }
      std::vector<int32_t> send(st), recv(rt, -1);
      for (size_t q = 0; q < n; ++q) {
        for (size_t j = 0; j < sc[q]; ++j) send[sd[q] + j] = input(rank, i, q * 100000 + j);
      }
      comms[rank]->alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                             DataType::kInt32);
      for (size_t q = 0; q < n; ++q) {
        for (size_t j = 0; j < rc[q]; ++j) {
          wrong[r] += recv[rd[q] + j] != input(static_cast<int>(q), i, r * 100000 + j);
        }
      }
      const size_t count = 30000;  // equal blocks, in place
      std::vector<int32_t> buf(n * count);
      for (size_t j = 0; j < n * count; ++j) buf[j] = input(rank, i, j);
      comms[rank]->alltoall(buf.data(), buf.data(), count, DataType::kInt32);
      for (size_t q = 0; q < n; ++q) {
        for (size_t j = 0; j < count; ++j) {
          wrong[r] += buf[q * count + j] != input(static_cast<int>(q), i, r * count + j);
        }
      }
      if (rank == 2) done++;
    }
  });
  injector.join();
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  expectOneAgreedFailover(comms, "r1");
}

// Both rails gone: a clear RailError on every rank, quickly, and the communicator refuses
// further work instead of returning partial results.
TEST(FailoverTest, AllRailsCutGivesClearErrorNotAHang) {
  auto comms = testing::makeJob(jobOptions(2, 2, hotEqualSplit));
  std::vector<std::string> errors(2);
  std::vector<double> seconds(2, 0);
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 3) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[0]->abortRail(0);
    comms[1]->abortRail(1);
  });
  runRanks(2, [&](int r) {
    std::vector<int32_t> buf(1 << 16, 1);
    auto t0 = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 100000; ++i) {
        t0 = std::chrono::steady_clock::now();
        comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kInt32, ReduceOp::kMax);
        if (r == 0) done++;
      }
    } catch (const RailError& e) {
      errors[r] = e.what();
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  });
  injector.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("no rail left"), std::string::npos)
        << "rank " << r << ": " << errors[r];
    // Bound from the task: the failing call returns within a few progress floors (0.5 s here),
    // far below the 10 s I/O timeout.
    EXPECT_LT(seconds[r], 5.0) << "rank " << r;
    int32_t x = 1;
    EXPECT_THROW(comms[r]->allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum), RailError);
  }
}

// Re-admission: the rail comes back after its hold-down, on every rank at the same operation,
// over fresh connections, and carries its share again; results stay exact throughout.
TEST(FailoverTest, FailedRailIsReadmittedAfterHoldDown) {
  auto comms = testing::makeJob(jobOptions(2, 2, [](Options& o) {
    hotEqualSplit(o);
    o.readmitHoldDown = std::chrono::milliseconds(150);
    // Fixed equal ratios: the test is about re-admission, not about the tuner (whose ratios
    // swing on loopback, where 100 KB slices take tens of microseconds).
    o.policy = Policy::kStatic;
  }));
  const int n = 2;
  const size_t count = 50000;
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 5) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[1]->abortRail(1);
  });
  std::vector<long> wrong(n, 0);
  std::vector<double> lastShare(n, 0);
  runRanks(n, [&](int r) {
    std::vector<int32_t> buf(count);
    for (int i = 0; i < 120; ++i) {
      for (size_t j = 0; j < count; ++j) buf[j] = input(r, i, j);
      comms[r]->allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong[r] += buf[j] != expectedSum(n, i, j);
      if (r == 1) done++;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    lastShare[r] = comms[r]->lastReport().split.at("r1");
  });
  injector.join();
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  ASSERT_EQ(comms[0]->metrics().readmissions.size(), 1u);
  for (int r = 0; r < n; ++r) {
    const Metrics& m = comms[r]->metrics();
    ASSERT_EQ(m.failovers.size(), 1u) << "rank " << r;
    ASSERT_EQ(m.readmissions.size(), 1u) << "rank " << r;
    EXPECT_EQ(m.readmissions[0].rail, "r1");
    EXPECT_EQ(m.readmissions[0].op, comms[0]->metrics().readmissions[0].op)
        << "ranks must re-admit at the same operation";
    EXPECT_GT(m.readmissions[0].op, m.failovers[0].op);
    EXPECT_TRUE(m.rails.at("r1").alive);
    EXPECT_NEAR(lastShare[r], 0.5, 0.01) << "rank " << r << ": r1 must carry its share again";
  }
}

// Waves: while r1 is out, a 16 MiB operation runs on r0 as 4 chunks in 2 waves with a round
// between them, so r1 can re-enter mid-operation and take its share of the rest. Whether the
// re-admission lands between waves or at an operation's end depends on the clock; either way
// every result is exact and every rank counts the same wave rounds and re-admissions.
// The hold-down (3 s) outlasts any one operation even under ThreadSanitizer on a loaded machine
// (a 16 MiB op took ~0.9 s there; with 100 ms the rail came back before any op ran without it,
// and no wave was ever needed), and the ranks run operations until the re-admission rather
// than a fixed count, so the test waits for the event, not for a guessed number of ops.
TEST(FailoverTest, LargeOpsRunInWavesWhileARailIsOutAndItRejoins) {
  auto comms = testing::makeJob(jobOptions(2, 2, [](Options& o) {
    hotEqualSplit(o);
    o.readmitHoldDown = std::chrono::milliseconds(3000);
    o.policy = Policy::kStatic;
  }));
  const int n = 2;
  const size_t count = size_t(4) << 20;  // 16 MiB of int32: 2 chunks per rail when split
  const int kMaxOps = 400;               // a bound, so a missing re-admission fails, not hangs
  std::atomic<int> done{0};
  std::thread injector([&] {
    while (done.load() < 3) std::this_thread::sleep_for(std::chrono::microseconds(50));
    comms[1]->abortRail(1);
  });
  std::vector<long> wrong(n, 0);
  std::vector<double> lastShare(n, 0);
  runRanks(n, [&](int r) {
    std::vector<int32_t> buf(count);
    int after = -1;  // operations still to run once every rank has seen the re-admission
    for (int i = 0; i < kMaxOps && after != 0; ++i) {
      for (size_t j = 0; j < count; ++j) buf[j] = input(r, i, j);
      comms[r]->allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t j = 0; j < count; ++j) wrong[r] += buf[j] != expectedSum(n, i, j);
      lastShare[r] = comms[r]->lastReport().split.at("r1");
      if (r == 1) done++;
      // Every rank leaves the loop after the same operation: whether anyone has re-admitted
      // is agreed with a max over ranks.
      int32_t readmitted = comms[r]->metrics().readmissions.empty() ? 0 : 1;
      comms[r]->allreduce(&readmitted, &readmitted, 1, DataType::kInt32, ReduceOp::kMax);
      if (after > 0) --after;
      if (after < 0 && readmitted == 1) after = 3;  // a few ops with r1 back, to see its share
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  injector.join();
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  const Metrics& m0 = comms[0]->metrics();
  ASSERT_EQ(m0.readmissions.size(), 1u);
  EXPECT_GE(m0.waveRounds, 1u) << "an op ran on r0 alone: 4 chunks, 2 waves";
  for (int r = 0; r < n; ++r) {
    const Metrics& m = comms[r]->metrics();
    ASSERT_EQ(m.failovers.size(), 1u) << "rank " << r;
    ASSERT_EQ(m.readmissions.size(), 1u) << "rank " << r;
    EXPECT_EQ(m.readmissions[0].op, m0.readmissions[0].op) << "rank " << r;
    EXPECT_EQ(m.waveRounds, m0.waveRounds) << "rank " << r << ": waves are decided alike";
    EXPECT_EQ(m.midOpReadmissions, m0.midOpReadmissions) << "rank " << r;
    EXPECT_TRUE(m.rails.at("r1").alive);
    EXPECT_NEAR(lastShare[r], 0.5, 0.01) << "rank " << r;
  }
  // With every rail alive again, no more waves: the last operations add none.
  const uint64_t waves = m0.waveRounds;
  runRanks(n, [&](int r) {
    std::vector<int32_t> buf(count, 1);
    comms[r]->allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
  });
  EXPECT_EQ(comms[0]->metrics().waveRounds, waves);
}

}  // namespace
}  // namespace nezha
