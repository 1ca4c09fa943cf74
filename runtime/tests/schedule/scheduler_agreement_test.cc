// Agreement across ranks: every rank picks the identical split for every operation while the
// online tuner changes ratios, and ends with the identical table; tables save and load.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

TEST(SchedulerAgreementTest, IdenticalSplitsOnEveryRankWhileTuning) {
  const int world = 3, ops = 40;
  auto comms = makeJob(jobOptions(world, 2, [](Options& o) {
    o.coldThreshold = 4096;
    o.tuneInterval = 3;
    o.minSliceBytes = 0;
  }));
  // splits[rank][op] = share of rail r0
  std::vector<std::vector<double>> splits(world, std::vector<double>(ops));
  std::vector<std::vector<bool>> hot(world, std::vector<bool>(ops));
  runRanks(world, [&](int r) {
    std::vector<float> buf(1 << 18);
    for (int i = 0; i < ops; ++i) {
      // Alternate sizes so several table entries tune at once; every 5th op is cold.
      size_t n = i % 5 == 4 ? 100 : (i % 2 ? buf.size() : buf.size() / 4);
      comms[r]->allreduce(buf.data(), buf.data(), n, DataType::kFloat32, ReduceOp::kSum);
      splits[r][i] = comms[r]->lastReport().split.at("r0");
      hot[r][i] = comms[r]->lastReport().hot;
    }
  });
  for (int i = 0; i < ops; ++i) {
    for (int r = 1; r < world; ++r) {
      ASSERT_EQ(splits[r][i], splits[0][i]) << "op " << i << " rank " << r;
      ASSERT_EQ(hot[r][i], hot[0][i]);
    }
    EXPECT_EQ(hot[0][i], i % 5 != 4) << "op " << i;
  }
  // Metrics: every op counted, per-rail bytes add up to the bytes of all operations.
  const Metrics& m = comms[0]->metrics();
  EXPECT_EQ(m.ops, static_cast<uint64_t>(ops));
  EXPECT_EQ(m.hotOps, static_cast<uint64_t>(ops - ops / 5));
  EXPECT_GE(m.agreements, 5u);
  uint64_t totalBytes = 0;
  for (int i = 0; i < ops; ++i)
    totalBytes += (i % 5 == 4 ? 100 : (i % 2 ? (1 << 18) : (1 << 16))) * 4;
  EXPECT_EQ(m.rails.at("r0").bytes + m.rails.at("r1").bytes, totalBytes);
  std::string table = comms[0]->tableJson();
  for (int r = 1; r < world; ++r) EXPECT_EQ(comms[r]->tableJson(), table);
  EXPECT_NE(table.find("\"updates\": "), std::string::npos);
  EXPECT_EQ(table.find("\"updates\": 0"), std::string::npos) << table;  // every entry tuned
}

TEST(SchedulerAgreementTest, TableSavesAndSeedsTheNextJob) {
  std::string path = ::testing::TempDir() + "nezha_table_test.json";
  {
    auto comms = makeJob(jobOptions(2, 2, [](Options& o) {
      o.coldThreshold = 0;
      o.minSliceBytes = 0;  // a skewed loopback probe must not collapse the split to one rail
    }));
    runRanks(2, [&](int r) {
      std::vector<float> buf(1 << 16);
      for (int i = 0; i < 10; ++i) {
        comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      }
    });
    comms[0]->saveTable(path);
  }
  std::ifstream in(path);
  std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(saved.find("\"op\": \"allreduce\""), std::string::npos) << saved;

  // Only rank 0 can read the file; the table reaches rank 1 over the network.
  auto opts = jobOptions(2, 2);
  opts[0].tablePath = path;
  opts[1].tablePath = "/nonexistent/only-rank-0-reads-it.json";
  auto comms = makeJob(opts);
  EXPECT_EQ(comms[1]->tableJson(), comms[0]->tableJson());
  EXPECT_NE(comms[1]->tableJson().find("\"allreduce\""), std::string::npos);
  EXPECT_EQ(comms[0]->coldThreshold(), 0u);  // taken from the table (env left it on auto)
  std::remove(path.c_str());
}

TEST(SchedulerAgreementTest, BadTableFailsEveryRank) {
  std::string path = ::testing::TempDir() + "nezha_bad_table.json";
  {
    std::ofstream out(path);
    out << R"({"format": "nezha-table/v1", "rails": ["x"], "cold_threshold": null, "entries": []})";
  }
  auto opts = jobOptions(2, 1);
  for (auto& o : opts) o.tablePath = path;
  std::vector<std::string> errors(2);
  runRanks(2, [&](int r) {
    try {
      Communicator c(opts[r]);
    } catch (const ConfigError& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("table is for rails [x] but this job has [r0]"), std::string::npos) << e;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace nezha
