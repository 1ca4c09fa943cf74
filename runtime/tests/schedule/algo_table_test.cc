// The algorithm table (schedule/algo_table.h): the built-in rules, first-match choice by size
// and rank count, a JSON round trip, and parse errors that name the bad field.
#include "schedule/algo_table.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace nezha {
namespace {

TEST(AlgoTableTest, BuiltinMatchesTheThresholds) {
  AlgoTable t(64 << 10, 256 << 10);
  const AlgoOptions& o = t.options();
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 1, 4), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, (64 << 10) - 1, 4), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 64 << 10, 4), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kBroadcast, 256 << 10, 4), Algorithm::kBinomialTree);
  EXPECT_EQ(o.choose(OpKind::kBroadcast, (256 << 10) + 1, 4), Algorithm::kPipelinedChain);
  EXPECT_EQ(o.choose(OpKind::kBroadcast, 1 << 30, 2), Algorithm::kBinomialTree);
  EXPECT_EQ(o.choose(OpKind::kAllgather, 1 << 30, 8), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kReduceScatter, 1, 8), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, 1, 3), Algorithm::kDirect);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, size_t(1) << 30, kAlltoallDirectMaxRanks),
            Algorithm::kDirect);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, kAlltoallDirectBytes - 1, 64), Algorithm::kDirect);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, kAlltoallDirectBytes, 9), Algorithm::kPairwise);
  // SHARP for every cold allreduce, as before the table existed; no cold rows.
  EXPECT_TRUE(t.offloadAllreduce(1, 4));
  EXPECT_TRUE(t.offloadAllreduce(size_t(1) << 40, 4));
  EXPECT_FALSE(t.coldThreshold(4).has_value());
}

TEST(AlgoTableTest, FirstMatchingRowWinsAndGapsFallBackToBuiltin) {
  AlgoTable t = AlgoTable::parse(R"({
    "format": "nezha-algo/v1",
    "cold_threshold": [{"max_ranks": 4, "bytes": 262144}, {"min_ranks": 5, "bytes": 65536}],
    "allreduce": [
      {"max_bytes": 4096, "algorithm": "recursive_doubling", "transport": "sharp"},
      {"min_ranks": 4, "max_ranks": 16, "max_bytes": 1048576, "algorithm": "halving_doubling"}
    ],
    "broadcast": [{"min_ranks": 3, "algorithm": "pipelined_chain"}]
  })",
                                 "t.json");
  const AlgoOptions& o = t.options();
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 100, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 100000, 8), Algorithm::kHalvingDoubling);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 100000, 16), Algorithm::kHalvingDoubling);
  // No row for 17 ranks at this size, nor for 3 ranks: the built-in rule (ring >= 64K).
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 100000, 17), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 100000, 3), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kAllreduce, 2 << 20, 8), Algorithm::kRing);
  EXPECT_EQ(o.choose(OpKind::kBroadcast, 10, 3), Algorithm::kPipelinedChain);
  EXPECT_EQ(o.choose(OpKind::kBroadcast, 10, 2), Algorithm::kBinomialTree);
  // SHARP only where a row says so; the built-in fallback row allows it (as before).
  EXPECT_TRUE(t.offloadAllreduce(100, 8));
  EXPECT_FALSE(t.offloadAllreduce(100000, 8));
  EXPECT_EQ(t.coldThreshold(2), 262144u);
  EXPECT_EQ(t.coldThreshold(4), 262144u);
  EXPECT_EQ(t.coldThreshold(1024), 65536u);
}

TEST(AlgoTableTest, AlltoallRowsChooseBySizeAndRanks) {
  AlgoTable t = AlgoTable::parse(R"({
    "format": "nezha-algo/v1",
    "alltoall": [{"max_ranks": 2, "algorithm": "pairwise"},
                 {"min_ranks": 3, "max_bytes": 65536, "algorithm": "direct"},
                 {"min_ranks": 3, "algorithm": "pairwise"}]
  })",
                                 "t.json");
  const AlgoOptions& o = t.options();
  EXPECT_EQ(o.choose(OpKind::kAlltoall, 10, 2), Algorithm::kPairwise);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, 65535, 3), Algorithm::kDirect);
  EXPECT_EQ(o.choose(OpKind::kAlltoall, 65536, 4), Algorithm::kPairwise);
  // Round trip keeps the rows (and lists no transport: only allreduce has one).
  const Json j = t.toJson();
  ASSERT_TRUE(j.contains("alltoall"));
  EXPECT_FALSE(j["alltoall"][0].contains("transport"));
  AlgoTable back = AlgoTable::parse(dumpJson(j), "again");
  EXPECT_EQ(back.options().rules.at(OpKind::kAlltoall), o.rules.at(OpKind::kAlltoall));
}

TEST(AlgoTableTest, RoundTrip) {
  AlgoTable t(32 << 10, 128 << 10);
  t.setRules(OpKind::kAllreduce, {AlgoRule{2, 3, 8192, Algorithm::kRecursiveDoubling, true},
                                  AlgoRule{4, 1024, 1 << 20, Algorithm::kHalvingDoubling, false},
                                  AlgoRule{1, INT_MAX, kAnyBytes, Algorithm::kRing, false}});
  t.setColdRules({ColdRule{2, 4, 1 << 18}, ColdRule{5, INT_MAX, size_t(1) << 50}});
  const std::string text = dumpJson(t.toJson(), 2);
  AlgoTable back = AlgoTable::parse(text, "round trip", 32 << 10, 128 << 10);
  EXPECT_EQ(dumpJson(back.toJson(), 2), text);
  for (const auto& [op, key] : algoTableOps()) {
    EXPECT_EQ(back.options().rules.at(op), t.options().rules.at(op)) << key;
  }
  EXPECT_EQ(back.coldThreshold(3), 1u << 18);
  EXPECT_EQ(back.coldThreshold(100), size_t(1) << 50);
}

std::string parseError(const std::string& text) {
  try {
    AlgoTable::parse(text, "NEZHA_ALGO_TABLE=t.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(parsed)";
}

TEST(AlgoTableTest, ErrorsNameTheField) {
  const std::string f = R"("format": "nezha-algo/v1")";
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {"", "NEZHA_ALGO_TABLE=t.json"},
      {"[]", "NEZHA_ALGO_TABLE=t.json"},
      {R"({"format": "nezha-table/v1"})", "format: \"nezha-table/v1\" is not nezha-algo/v1"},
      {"{" + f + R"(, "allreduce": [{"algorithm": "bruck"}]})",
       "allreduce[0].algorithm: \"bruck\" is not a allreduce algorithm (ring, "
       "recursive_doubling, halving_doubling)"},
      {"{" + f + R"(, "broadcast": [{"algorithm": "ring"}]})", "broadcast[0].algorithm"},
      {"{" + f + R"(, "allreduce": [{"algorithm": "ring"}, {"max_byte": 4, "algorithm": "ring"}]})",
       "allreduce[1].max_byte: unknown key"},
      {"{" + f + R"(, "allreduce": [{"max_bytes": 0, "algorithm": "ring"}]})",
       "allreduce[0].max_bytes: 0 matches no size"},
      {"{" + f + R"(, "allreduce": [{"max_bytes": -4, "algorithm": "ring"}]})",
       "allreduce[0].max_bytes"},
      {"{" + f + R"(, "allreduce": [{"min_ranks": 8, "max_ranks": 4, "algorithm": "ring"}]})",
       "allreduce[0].max_ranks: 4 is below min_ranks 8"},
      {"{" + f + R"(, "allreduce": [{"min_ranks": 0, "algorithm": "ring"}]})",
       "allreduce[0].min_ranks"},
      {"{" + f + R"(, "allreduce": [{"algorithm": "ring", "transport": "rdma"}]})",
       "allreduce[0].transport: \"rdma\" is not any or sharp"},
      {"{" + f + R"(, "allgather": [{"algorithm": "ring", "transport": "sharp"}]})",
       "allgather[0].transport: \"sharp\" is not any (only allreduce has SHARP)"},
      {"{" + f + R"(, "allreduce": {"algorithm": "ring"}})", "allreduce"},
      {"{" + f + R"(, "allreduce": [{}]})", "allreduce[0]"},
      {"{" + f + R"(, "alltoall": [{"algorithm": "ring"}]})",
       "alltoall[0].algorithm: \"ring\" is not a alltoall algorithm (pairwise, direct)"},
      {"{" + f + R"(, "alltoall": [{"algorithm": "direct"}, {"algorithm": "bruck"}]})",
       "alltoall[1].algorithm: \"bruck\" is not a alltoall algorithm"},
      {"{" + f + R"(, "alltoall": [{"algorithm": "pairwise", "transport": "sharp"}]})",
       "alltoall[0].transport: \"sharp\" is not any (only allreduce has SHARP)"},
      {"{" + f + R"(, "alltoall": [{"max_bytes": 0, "algorithm": "direct"}]})",
       "alltoall[0].max_bytes: 0 matches no size"},
      {"{" + f + R"(, "alltoall": [{"algorithm": "direct", "max_ranks": "4"}]})",
       "alltoall[0].max_ranks"},
      {"{" + f + R"(, "alltoall": [{"max_bytes": 4096}]})", "alltoall[0]"},
      {"{" + f + R"(, "alltoall": {"algorithm": "direct"}})", "alltoall"},
      {"{" + f + R"(, "all_to_all": []})",
       "all_to_all: unknown key (known: format, cold_threshold, allreduce, broadcast, "
       "allgather, reduce_scatter, alltoall)"},
      {"{" + f + R"(, "allreduc": []})", "allreduc: unknown key"},
      {"{" + f + R"(, "cold_threshold": [{"bytes": 1125899906842625}]})",
       "cold_threshold[0].bytes"},
      {"{" + f + R"(, "cold_threshold": [{"min_ranks": 2}]})", "cold_threshold[0]"},
  };
  for (const Case& c : cases) {
    const std::string got = parseError(c.text);
    EXPECT_NE(got.find(c.want), std::string::npos) << c.text << "\n  -> " << got;
    EXPECT_NE(got.find("NEZHA_ALGO_TABLE=t.json"), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace nezha
