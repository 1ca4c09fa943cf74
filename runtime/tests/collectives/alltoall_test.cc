// alltoall / alltoallv (comm/communicator_alltoall.cc, collectives/alltoall.cc): every
// algorithm forced by a table, on in-process jobs of 2, 3 and 4 ranks, cold (whole on one rail)
// and hot (split over two rails), with equal, uneven and zero counts, in place, and checked
// element by element against what each sender put in. Plus the arithmetic that cuts every
// message by a slice of the unit space.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "collectives/collectives.h"
#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

// Any partition of the units into consecutive slices cuts every message into consecutive,
// non-overlapping parts that cover it exactly (what makes split, chunking and replay exact).
TEST(AlltoallMessagePart, SlicesTileEveryMessage) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t units = 1 + rng() % 5000;
    const size_t count = trial % 5 == 0 ? 0 : rng() % (3 * units + 2);
    size_t at = 0, covered = 0;
    while (at < units) {
      const size_t len = std::min(units - at, size_t(1) + rng() % (units / 3 + 1));
      const auto [b, e] = messagePart(count, at, at + len, units);
      ASSERT_EQ(b, covered) << "count " << count << " units " << units;
      ASSERT_LE(b, e);
      covered = e;
      at += len;
    }
    EXPECT_EQ(covered, count);
  }
  // No overflow at the largest sizes Nezha accepts (2^50 elements).
  const size_t big = size_t(1) << 50;
  EXPECT_EQ(messagePart(big, big / 2, big, big).first, big / 2);
  EXPECT_EQ(messagePart(big - 1, 0, big, big).second, big - 1);
}

struct Param {
  const char* algorithm;
  int ranks;
  bool hot;
};

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.algorithm) + "_ranks" + std::to_string(info.param.ranks) +
         (info.param.hot ? "_hot" : "_cold");
}

// What rank `from` sends rank `to` at index i: tells sender, receiver and position apart.
int32_t value(size_t from, size_t to, size_t i) {
  return static_cast<int32_t>(from * 10000000 + to * 100000 + i % 99991);
}

class AlltoallTest : public ::testing::TestWithParam<Param> {};

TEST_P(AlltoallTest, EveryBlockArrivesExactly) {
  const Param p = GetParam();
  const size_t n = static_cast<size_t>(p.ranks);
  auto comms = makeJob(jobOptions(p.ranks, 2, [&](Options& o) {
    o.probeBytes = 0;  // equal rails: a hot operation really splits
    o.minSliceBytes = 0;
    o.coldThreshold = p.hot ? size_t(0) : size_t(1) << 50;
  }));
  const std::string table = std::string("{\"format\": \"nezha-algo/v1\", \"alltoall\": ") +
                            "[{\"algorithm\": \"" + p.algorithm + "\"}]}";
  runRanks(p.ranks, [&](int rank) {
    Communicator& c = *comms[rank];
    const size_t r = static_cast<size_t>(rank);
    c.setAlgoTable(table);
    // alltoall, out of place and in place, from one element to a streaming size.
    for (size_t count : {size_t(0), size_t(1), size_t(13), size_t(70001)}) {
      std::vector<int32_t> send(n * count), recv(n * count, -1);
      for (size_t q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) send[q * count + i] = value(r, q, i);
      }
      std::vector<int32_t> inplace = send;
      c.alltoall(send.data(), recv.data(), count, DataType::kInt32);
      EXPECT_EQ(c.lastReport().op, OpKind::kAlltoall);
      // Only the peers' blocks travel: (n-1) * count elements per rank, not n * n * count.
      EXPECT_EQ(c.lastReport().bytes, (n - 1) * count * sizeof(int32_t));
      if (p.hot && count == 70001) {
        EXPECT_TRUE(c.lastReport().hot);
        for (const auto& [rail, b] : c.lastReport().railBytes) EXPECT_GT(b, 0u) << rail;
      }
      c.alltoall(inplace.data(), inplace.data(), count, DataType::kInt32);
      for (size_t q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[q * count + i], value(q, r, i)) << "from " << q << " index " << i;
          ASSERT_EQ(inplace[q * count + i], value(q, r, i)) << "in place, from " << q;
        }
      }
    }
    // alltoallv: uneven counts, some pairs (self included) send nothing, displacements in
    // reverse rank order with gaps; then every count zero.
    for (int shape = 0; shape < 2; ++shape) {
      auto amount = [&](size_t from, size_t to) -> size_t {
        if (shape == 1 || (from + 2 * to) % 3 == 0) return 0;
        return (from * 7 + to * 3) % 5 * 9001 + from;
      };
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t st = 0, rt = 0;
      for (size_t k = n; k-- > 0;) {
        sc[k] = amount(r, k);
        sd[k] = st;
        st += sc[k] + 3;
        rc[k] = amount(k, r);
        rd[k] = rt;
        rt += rc[k] + 5;
      }
      std::vector<int32_t> send(st, -2), recv(rt, -1);
      for (size_t q = 0; q < n; ++q) {
        for (size_t i = 0; i < sc[q]; ++i) send[sd[q] + i] = value(r, q, i);
      }
      c.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                  DataType::kInt32);
      for (size_t q = 0; q < n; ++q) {
        for (size_t i = 0; i < rc[q]; ++i) {
          ASSERT_EQ(recv[rd[q] + i], value(q, r, i)) << "shape " << shape << " from " << q;
        }
        for (size_t i = rc[q]; i < rc[q] + 5; ++i) {
          ASSERT_EQ(recv[rd[q] + i], -1) << "gap after the block from " << q << " written";
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlltoallTest,
                         ::testing::Values(Param{"pairwise", 2, false}, Param{"pairwise", 3, true},
                                           Param{"pairwise", 4, false}, Param{"pairwise", 4, true},
                                           Param{"direct", 2, true}, Param{"direct", 3, false},
                                           Param{"direct", 3, true}, Param{"direct", 4, true}),
                         paramName);

// The built-in rules (no table; direct at these rank counts), on one rail and on one rank.
TEST(AlltoallBuiltin, SmallAndLargeOnOneRailAndOneRank) {
  for (int ranks : {1, 3}) {
    auto comms = makeJob(jobOptions(ranks, 1));
    const size_t n = static_cast<size_t>(ranks);
    runRanks(ranks, [&](int rank) {
      Communicator& c = *comms[rank];
      for (size_t count : {size_t(100), size_t(300000)}) {
        std::vector<int32_t> send(n * count), recv(n * count, -1);
        for (size_t q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; ++i) send[q * count + i] = value(rank, q, i);
        }
        c.alltoall(send.data(), recv.data(), count, DataType::kInt32);
        for (size_t q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; i += 7) {
            ASSERT_EQ(recv[q * count + i], value(q, rank, i));
          }
        }
      }
    });
  }
}

// Bad arguments fail on every rank with a message naming the pair, and the job goes on.
TEST(AlltoallArgs, MismatchAndNullBuffersAreInvalidArgumentOnEveryRank) {
  auto comms = makeJob(jobOptions(3, 1));
  std::vector<std::string> errors(3);
  runRanks(3, [&](int r) {
    Communicator& c = *comms[r];
    std::vector<size_t> counts(3, 2), displs{0, 2, 4}, expect = counts;
    std::vector<int32_t> send(6, r), recv(6);
    if (r == 2) expect[0] = 3;  // rank 2 expects 3 from rank 0, which sends 2
    try {
      c.alltoallv(send.data(), counts.data(), displs.data(), recv.data(), expect.data(),
                  displs.data(), DataType::kInt32);
    } catch (const InvalidArgument& e) {
      errors[r] = e.what();
    }
    EXPECT_THROW(c.alltoall(nullptr, recv.data(), 2, DataType::kInt32), InvalidArgument);
    std::vector<size_t> none(3, 0);
    std::vector<size_t> mine = r == 1 ? counts : none;  // rank 1 sends from a null buffer
    try {
      c.alltoallv(r == 1 ? nullptr : send.data(), mine.data(), displs.data(), recv.data(),
                  none.data(), displs.data(), DataType::kInt32);
      ADD_FAILURE() << "rank " << r << " did not throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(r == 1 ? "null sendbuf" : "rank 1 passed invalid"),
                std::string::npos)
          << e.what();
    }
    int64_t one = 1;
    c.allreduce(&one, &one, 1, DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(one, 3);
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e, "alltoallv: rank 2 expects 3 elements from rank 0, which sends 2");
  }
}

}  // namespace
}  // namespace nezha
