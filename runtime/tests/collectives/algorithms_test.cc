// Every algorithm of the algorithm table (collectives/algorithm.h), forced by a table, on
// in-process jobs of 2, 3, 4, 5 and 8 ranks (powers of two and not), cold (one rail) and hot
// (split over two rails), compared exactly against a reference reduction computed in double.
// Counts cover fewer elements than ranks (the fallback to recursive doubling), uneven blocks
// and sizes large enough to stream. Plus: ranks holding different tables fail at start.
#include <gtest/gtest.h>

#include <cstring>

#include "base/dtype.h"
#include "collectives/algorithm.h"
#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

struct Param {
  const char* name;  // test name
  const char* allreduce;
  const char* broadcast;
  int ranks;
  bool hot;
};

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.name) + "_ranks" + std::to_string(info.param.ranks) +
         (info.param.hot ? "_hot" : "_cold");
}

std::string forcingTable(const Param& p) {
  return std::string("{\"format\": \"nezha-algo/v1\", \"allreduce\": [{\"algorithm\": \"") +
         p.allreduce + "\"}], \"broadcast\": [{\"algorithm\": \"" + p.broadcast + "\"}]}";
}

// Rank r's i-th input: sums of 8 ranks stay <= 40, products <= 256, exact in every dtype.
double input(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) return static_cast<double>((rank + i) % 2 + 1);
  return static_cast<double>((rank * 7 + i * 3) % 5 + 1);
}

double reference(ReduceOp op, int ranks, size_t i) {
  double acc = input(op, 0, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = input(op, r, i);
    if (op == ReduceOp::kSum) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
  }
  return acc;
}

std::string firstMismatch(DataType t, const void* got, size_t n,
                          const std::function<double(size_t)>& want) {
  for (size_t i = 0; i < n; ++i) {
    const double g = loadElement(t, got, i), w = want(i);
    if (g != w) {
      return "element " + std::to_string(i) + " of " + std::to_string(n) + ": got " +
             std::to_string(g) + " want " + std::to_string(w);
    }
  }
  return "";
}

class AlgorithmsTest : public ::testing::TestWithParam<Param> {};

TEST_P(AlgorithmsTest, ExactAgainstReference) {
  const Param p = GetParam();
  const std::string table = forcingTable(p);
  auto opts = jobOptions(p.ranks, p.hot ? 2 : 1, [&](Options& o) {
    o.algoTable = table;
    o.coldThreshold = p.hot ? 0 : (size_t(1) << 40);
    o.minSliceBytes = 0;  // hot: even small operations use both rails
    o.streamsPerPeer = 1;
    o.probeBytes = 16 << 10;
  });
  auto comms = makeJob(opts);
  const int world = p.ranks;
  // < ranks (fallback), == ranks, uneven blocks, and large enough to stream in pieces.
  const std::vector<size_t> counts = {1, static_cast<size_t>(world), 7, 1001, 65537};
  const DataType types[] = {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  runRanks(world, [&](int rank) {
    Communicator& c = *comms[rank];
    for (size_t n : counts) {
      for (DataType t : types) {
        const size_t es = dataTypeSize(t);
        for (ReduceOp op : ops) {
          const std::string tag = std::string(toString(t)) + "/" + toString(op) + " count " +
                                  std::to_string(n) + " rank " + std::to_string(rank);
          std::vector<char> in(n * es), out(n * es);
          for (size_t i = 0; i < n; ++i) storeElement(t, in.data(), i, input(op, rank, i));
          c.allreduce(in.data(), out.data(), n, t, op);
          auto ref = [&](size_t i) { return reference(op, world, i); };
          EXPECT_EQ(firstMismatch(t, out.data(), n, ref), "") << p.allreduce << " " << tag;
          EXPECT_EQ(firstMismatch(t, in.data(), n, [&](size_t i) { return input(op, rank, i); }),
                    "")
              << p.allreduce << " modified its input " << tag;
          c.allreduce(in.data(), in.data(), n, t, op);
          EXPECT_EQ(firstMismatch(t, in.data(), n, ref), "") << p.allreduce << " in place " << tag;
        }
        const int root = static_cast<int>(n % world);
        std::vector<char> b(n * es);
        for (size_t i = 0; i < n; ++i) {
          storeElement(t, b.data(), i, rank == root ? double(i % 100) : -1.0);
        }
        c.broadcast(b.data(), n, t, root);
        EXPECT_EQ(firstMismatch(t, b.data(), n, [](size_t i) { return double(i % 100); }), "")
            << p.broadcast << " root " << root << " count " << n << " rank " << rank;
      }
    }
    c.barrier();
  });
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (int ranks : {2, 3, 4, 5, 8}) {
    for (bool hot : {false, true}) {
      out.push_back({"halving_doubling", "halving_doubling", "binomial_tree", ranks, hot});
      out.push_back({"ring", "ring", "pipelined_chain", ranks, hot});
      out.push_back({"recursive_doubling", "recursive_doubling", "binomial_tree", ranks, hot});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tables, AlgorithmsTest, ::testing::ValuesIn(params()), paramName);

// The table in force is the one given, and the choice follows its rows.
TEST(AlgorithmsTableTest, CommunicatorReportsAndSwapsItsTable) {
  auto comms = makeJob(jobOptions(3, 1, [](Options& o) {
    o.algoTable = R"({"format": "nezha-algo/v1",
                      "allreduce": [{"max_bytes": 4096, "algorithm": "halving_doubling"}]})";
  }));
  runRanks(3, [&](int rank) {
    Communicator& c = *comms[rank];
    EXPECT_NE(c.algoTableJson().find("halving_doubling"), std::string::npos);
    std::vector<int32_t> v(3000, rank + 1);
    c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(v[2999], 6);
    c.setAlgoTable("");  // back to the built-in rules, on every rank at the same point
    EXPECT_EQ(c.algoTableJson().find("halving_doubling"), std::string::npos);
    c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(v[0], 18);
    EXPECT_THROW(c.setAlgoTable("{\"format\": \"nezha-algo/v1\", \"allreduce\": 3}"), ConfigError);
  });
}

// Ranks holding different algorithm tables would pick different algorithms for the same
// operation and hang; the rendezvous refuses the job at start and names the setting.
TEST(AlgorithmsTableTest, RanksWithDifferentTablesFailAtStart) {
  auto opts = jobOptions(3, 1, [](Options& o) {
    o.rendezvousTimeout = std::chrono::milliseconds(5000);
    o.algoTable = R"({"format": "nezha-algo/v1", "allreduce": [{"algorithm": "ring"}]})";
  });
  opts[2].algoTable =
      R"({"format": "nezha-algo/v1", "allreduce": [{"algorithm": "halving_doubling"}]})";
  std::vector<std::string> errors(3);
  runRanks(3, [&](int rank) {
    try {
      Communicator c(opts[rank]);
    } catch (const ConfigError& e) {
      errors[rank] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("algo_table=sha256:"), std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank 2 has settings"), std::string::npos) << errors[r];
  }
  // The same table written differently (whitespace, key order) is the same table.
  auto same = jobOptions(2, 1, [](Options& o) {
    o.algoTable = R"({"format": "nezha-algo/v1", "allreduce": [{"algorithm": "ring"}]})";
  });
  same[1].algoTable =
      "{ \"allreduce\" : [ { \"algorithm\" : \"ring\" } ],\n \"format\" : \"nezha-algo/v1\" }";
  auto comms = makeJob(same);
  EXPECT_EQ(comms.size(), 2u);
}

}  // namespace
}  // namespace nezha
