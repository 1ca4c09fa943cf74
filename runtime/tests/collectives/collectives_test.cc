// Every collective x dtype x reduce op on in-process jobs of 2-4 ranks and 1-3 loopback rails,
// in-place and out-of-place, compared exactly against a reference computed in double.
// Inputs are small integers so every dtype (even bfloat16) represents the exact result; the
// 16-bit rounding itself is covered by dtype_reduce_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/dtype.h"
#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

struct Param {
  int ranks;
  int rails;
  size_t count;
  bool hot;  // true: every op is split across rails; false: cold start (one rail)
};

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return "ranks" + std::to_string(p.ranks) + "_rails" + std::to_string(p.rails) + "_count" +
         std::to_string(p.count) + (p.hot ? "_hot" : "_cold");
}

const DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};

// Rank r's i-th input: products stay <= 16, sums <= 20, all exact in every dtype.
double input(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) return static_cast<double>((rank + i) % 2 + 1);
  return static_cast<double>((rank * 7 + i * 3) % 5 + 1);
}

double reference(ReduceOp op, int ranks, size_t i) {
  double acc = input(op, 0, i);
  for (int r = 1; r < ranks; ++r) {
    double v = input(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  return acc;
}

// Returns "" or a description of the first mismatch.
std::string compare(DataType t, const void* got, size_t n,
                    const std::function<double(size_t)>& want) {
  for (size_t i = 0; i < n; ++i) {
    double g = loadElement(t, got, i), w = want(i);
    if (g != w) {
      return "element " + std::to_string(i) + " of " + std::to_string(n) + ": got " +
             std::to_string(g) + " want " + std::to_string(w);
    }
  }
  return "";
}

class CollectivesTest : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesTest, AllCollectivesAllTypes) {
  const Param p = GetParam();
  auto opts = jobOptions(p.ranks, p.rails, [&](Options& o) {
    o.coldThreshold = p.hot ? 0 : (size_t(1) << 40);
    o.minSliceBytes = 0;                             // let even tiny ops use every rail
    o.ringThreshold = 256;                           // exercise both recursive doubling and ring
    o.chainThreshold = 1024;                         // and the pipelined broadcast
    o.tuneInterval = 4;                              // agreement rounds happen during the test
    o.streamsPerPeer = 1 + (p.ranks + p.rails) % 3;  // 1-3 streams across the parameter set
  });
  auto comms = makeJob(opts);
  const size_t n = p.count;
  const int world = p.ranks;
  runRanks(world, [&](int rank) {
    Communicator& c = *comms[rank];
    for (DataType t : kTypes) {
      const size_t es = dataTypeSize(t);
      std::string what = std::string(toString(t));
      for (ReduceOp op : kOps) {
        std::string tag = what + "/" + toString(op) + " rank " + std::to_string(rank);
        // allreduce out-of-place, then in-place.
        std::vector<char> in(n * es + 1), out(n * es + 1);
        for (size_t i = 0; i < n; ++i) storeElement(t, in.data(), i, input(op, rank, i));
        c.allreduce(in.data(), out.data(), n, t, op);
        auto ref = [&](size_t i) { return reference(op, world, i); };
        EXPECT_EQ(compare(t, out.data(), n, ref), "") << "allreduce " << tag;
        EXPECT_EQ(compare(t, in.data(), n, [&](size_t i) { return input(op, rank, i); }), "")
            << "allreduce modified its input " << tag;
        c.allreduce(in.data(), in.data(), n, t, op);
        EXPECT_EQ(compare(t, in.data(), n, ref), "") << "allreduce in-place " << tag;

        // reduce_scatter: rank r gets elements [r*n, (r+1)*n) of the reduced world*n vector.
        std::vector<char> rsIn(world * n * es + 1), rsOut(n * es + 1);
        for (size_t i = 0; i < world * n; ++i) storeElement(t, rsIn.data(), i, input(op, rank, i));
        c.reduceScatter(rsIn.data(), rsOut.data(), n, t, op);
        auto rsRef = [&](size_t i) { return reference(op, world, rank * n + i); };
        EXPECT_EQ(compare(t, rsOut.data(), n, rsRef), "") << "reduce_scatter " << tag;
        char* mine = rsIn.data() + rank * n * es;
        c.reduceScatter(rsIn.data(), mine, n, t, op);
        EXPECT_EQ(compare(t, mine, n, rsRef), "") << "reduce_scatter in-place " << tag;
      }
      // broadcast from a root that depends on the size.
      int root = static_cast<int>(n % world);
      std::vector<char> b(n * es + 1);
      for (size_t i = 0; i < n; ++i)
        storeElement(t, b.data(), i, rank == root ? double(i % 100) : -1.0);
      c.broadcast(b.data(), n, t, root);
      EXPECT_EQ(compare(t, b.data(), n, [](size_t i) { return double(i % 100); }), "")
          << "broadcast " << what << " root " << root << " rank " << rank;

      // allgather out-of-place and in-place.
      std::vector<char> mineIn(n * es + 1), all(world * n * es + 1);
      for (size_t i = 0; i < n; ++i)
        storeElement(t, mineIn.data(), i, double((rank * 31 + i) % 50));
      auto agRef = [&](size_t i) {
        return double(((i / std::max<size_t>(n, 1)) * 31 + i % std::max<size_t>(n, 1)) % 50);
      };
      c.allgather(mineIn.data(), all.data(), n, t);
      EXPECT_EQ(compare(t, all.data(), world * n, agRef), "")
          << "allgather " << what << " rank " << rank;
      std::vector<char> all2(world * n * es + 1);
      std::memcpy(all2.data() + rank * n * es, mineIn.data(), n * es);
      c.allgather(all2.data() + rank * n * es, all2.data(), n, t);
      EXPECT_EQ(compare(t, all2.data(), world * n, agRef), "")
          << "allgather in-place " << what << " rank " << rank;
    }
    c.barrier();
  });
}

std::vector<Param> params() {
  std::vector<Param> ps;
  for (int ranks = 2; ranks <= 4; ++ranks) {
    for (int rails = 1; rails <= 3; ++rails) {
      for (size_t count : {size_t(0), size_t(1), size_t(13), size_t(1031)}) {
        ps.push_back({ranks, rails, count, true});
      }
    }
  }
  ps.push_back({3, 3, 65537, true});
  ps.push_back({4, 2, 65537, true});
  ps.push_back({2, 3, 1031, false});
  ps.push_back({3, 2, 7, false});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Loopback, CollectivesTest, ::testing::ValuesIn(params()), paramName);

// Random float32 data: results within tolerance of a double reference (summation order differs
// between algorithms) and bit-identical across ranks.
TEST(CollectivesFloatTest, RandomFloat32SumWithinToleranceAndIdenticalOnAllRanks) {
  const int world = 3;
  const size_t n = 100003;
  auto comms = makeJob(jobOptions(world, 2, [](Options& o) {
    o.coldThreshold = 0;
    o.minSliceBytes = 0;
    o.streamsPerPeer = 3;  // parts that do not divide evenly
  }));
  std::vector<std::vector<float>> inputs(world, std::vector<float>(n));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : inputs)
    for (auto& x : v) x = dist(rng);
  std::vector<std::vector<float>> outs(world, std::vector<float>(n));
  runRanks(world, [&](int r) {
    comms[r]->allreduce(inputs[r].data(), outs[r].data(), n, DataType::kFloat32, ReduceOp::kSum);
  });
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < world; ++r) want += inputs[r][i];
    ASSERT_NEAR(outs[0][i], want, 1e-5) << "element " << i;
    ASSERT_EQ(outs[1][i], outs[0][i]);
    ASSERT_EQ(outs[2][i], outs[0][i]);
  }
}

TEST(CollectivesSingleRankTest, WorldOfOneCopies) {
  Options o;
  o.rails = testing::loopbackRails(1);
  Communicator c(o);
  std::vector<int32_t> in{1, 2, 3}, out(3);
  c.allreduce(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(out, in);
  std::vector<int32_t> gathered(3);
  c.allgather(in.data(), gathered.data(), 3, DataType::kInt32);
  EXPECT_EQ(gathered, in);
  c.barrier();
}

}  // namespace
}  // namespace nezha
