// Data-length table JSON: round trip and validation errors naming the field.
#include "schedule/table.h"

#include <gtest/gtest.h>

#include "base/json.h"

namespace nezha {
namespace {

TEST(SizeBucketTest, PowersOfTwo) {
  EXPECT_EQ(sizeBucket(0), 0);
  EXPECT_EQ(sizeBucket(1), 0);
  EXPECT_EQ(sizeBucket(1023), 9);
  EXPECT_EQ(sizeBucket(1024), 10);
  EXPECT_EQ(sizeBucket(64 << 20), 26);
}

TEST(TableTest, JsonRoundTrip) {
  Table t({"r0", "r1"});
  t.coldThreshold = 65536;
  TableEntry& e = t.entry({OpKind::kAllreduce, 4, 26}, {0.73, 0.27});
  e.ops = 120;
  e.updates = 24;
  t.entry({OpKind::kAllgather, 2, 20}, {0.5, 0.5});
  std::string text = dumpJson(t.toJson());
  Table back = Table::fromJson(text, {"r0", "r1"}, "table.json");
  ASSERT_TRUE(back.coldThreshold.has_value());
  EXPECT_EQ(*back.coldThreshold, 65536u);
  ASSERT_EQ(back.entries().size(), 2u);
  const TableEntry* b = back.find({OpKind::kAllreduce, 4, 26});
  ASSERT_NE(b, nullptr);
  EXPECT_DOUBLE_EQ(b->ratios[0], 0.73);
  EXPECT_EQ(b->ops, 120u);
  EXPECT_EQ(b->updates, 24u);
  EXPECT_EQ(back.toJson().dump(), text);
}

std::string validTable() {
  return R"({"format": "nezha-table/v1", "rails": ["r0", "r1"], "cold_threshold": null,
    "entries": [{"op": "allreduce", "world_size": 4, "bucket_bytes": 1048576,
                 "ratios": {"r0": 0.6, "r1": 0.4}}]})";
}

std::string errorOf(const std::string& text) {
  try {
    Table::fromJson(text, {"r0", "r1"}, "t.json");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// nezha-tune writes 2^50 when hot never wins; its own loader must take that table back
// (a test-bed run once produced one and the load failed).
TEST(TableTest, NeverSplitThresholdRoundTrips) {
  Table t({"r0", "r1"});
  t.coldThreshold = kNeverSplitBytes;
  Table back = Table::fromJson(dumpJson(t.toJson()), {"r0", "r1"}, "t.json");
  ASSERT_TRUE(back.coldThreshold.has_value());
  EXPECT_EQ(*back.coldThreshold, kNeverSplitBytes);
  std::string over = dumpJson(t.toJson());
  over.replace(over.find("1125899906842624"), 16, "1125899906842625");
  EXPECT_NE(errorOf(over).find("t.json cold_threshold: 1125899906842625 out of range"),
            std::string::npos)
      << errorOf(over);
}

TEST(TableTest, ValidationErrorsNameTheField) {
  EXPECT_EQ(errorOf(validTable()), "");
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = validTable();
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(errorOf(with("nezha-table/v1", "v0")).find("format"), std::string::npos);
  EXPECT_NE(errorOf(with("[\"r0\", \"r1\"]", "[\"r0\"]")).find("table is for rails [r0]"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"allreduce\"", "\"gather\"")).find("unknown collective"),
            std::string::npos);
  EXPECT_NE(
      errorOf(with("1048576", "1000")).find("entries[0].bucket_bytes: 1000 is not a power of two"),
      std::string::npos);
  EXPECT_NE(errorOf(with("\"world_size\": 4", "\"world_size\": 0")).find("world_size"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"r1\": 0.4", "\"r1\": 1.4")).find("ratios.r1"), std::string::npos);
  EXPECT_NE(errorOf(with("\"r1\": 0.4", "\"r2\": 0.4")).find("missing field \"r1\""),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"r0\": 0.6, \"r1\": 0.4", "\"r0\": 0, \"r1\": 0")).find("all zero"),
            std::string::npos);
  EXPECT_NE(errorOf("[]").find("expected an object"), std::string::npos);
  // Numbers that do not fit the field's type name the field.
  EXPECT_NE(errorOf(with("\"world_size\": 4", "\"world_size\": 4.5"))
                .find("entries[0].world_size: 4.5 is not an integer"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"world_size\": 4", "\"world_size\": 99999999999999999999"))
                .find("entries[0].world_size"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"r1\": 0.4", "\"r1\": 1e400")).find("not valid JSON (number overflow"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"r1\": 0.4", "\"r1\": NaN")).find("t.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"r1\": 0.4", "\"r1\": \"0.4\""))
                .find("ratios.r1: expected a number, got string"),
            std::string::npos);
  EXPECT_NE(errorOf(with("\"cold_threshold\": null", "\"cold_threshold\": -1"))
                .find("cold_threshold: -1 out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace nezha
