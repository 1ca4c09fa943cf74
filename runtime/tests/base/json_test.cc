// Strict JSON reads: every rejection names the field and the reason.
#include "base/json.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace nezha {
namespace {

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(JsonTest, ParsesAndDumpsRoundTrip) {
  Json j = parseJson(R"({"a": [1, 2.5, "x\n", true, null], "b": {"c": -3e2}})", "t");
  EXPECT_EQ(finiteNumber(arrayValue(member(j, "a", "t"), "a")[1], "n"), 2.5);
  EXPECT_EQ(stringValue(member(j, "a", "t")[2], "s"), "x\n");
  EXPECT_EQ(finiteNumber(member(member(j, "b", "t"), "c", "b"), "c"), -300);
  EXPECT_EQ(dumpJson(parseJson(dumpJson(j), "again")), dumpJson(j));
}

TEST(JsonTest, MalformedTextIsAConfigErrorWithPosition) {
  for (const char* bad : {"{\"a\": }", "[1, 2", "{} x", "", "NaN", "Infinity", "[-Infinity]",
                          "[1e400]", "[-1e400]", "{\"a\": 1,}", "[01]", "\"\\x\""}) {
    std::string e = errorOf([&] { parseJson(bad, "f.json"); });
    EXPECT_EQ(e.rfind("f.json: not valid JSON (", 0), 0u) << bad << " -> " << e;
  }
  EXPECT_NE(errorOf([] { parseJson("[1e400]", "f"); }).find("number overflow"), std::string::npos);
  EXPECT_NE(errorOf([] { parseJson("{\n \"a\": }", "f"); }).find("line 2"), std::string::npos);
}

TEST(JsonTest, TypedReadsNameTheField) {
  Json j = parseJson(R"({"i": 7, "f": 7.5, "big": 18446744073709551615, "huge": 1e300,
                         "neg": -3, "s": "x", "tiny": 1e-400})",
                     "t");
  EXPECT_EQ(integerIn(member(j, "i", "t"), "t.i", 0, 10), 7);
  EXPECT_EQ(errorOf([&] { integerIn(member(j, "i", "t"), "t.i", 0, 5); }),
            "t.i: 7 out of range [0, 5]");
  EXPECT_EQ(errorOf([&] { integerIn(member(j, "f", "t"), "t.f", 0, 10); }),
            "t.f: 7.5 is not an integer");
  EXPECT_EQ(errorOf([&] { integerIn(member(j, "big", "t"), "t.big", 0, 1 << 20); }),
            "t.big: 18446744073709551615 out of range [0, 1048576]");
  EXPECT_NE(errorOf([&] {
              integerIn(member(j, "huge", "t"), "t.huge", 0, INT64_MAX);
            }).find("t.huge: 1e+300 out of range"),
            std::string::npos);
  EXPECT_EQ(unsignedUpTo(member(j, "big", "t"), "t.big", UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(errorOf([&] { unsignedUpTo(member(j, "neg", "t"), "t.neg", 10); }),
            "t.neg: -3 out of range [0, 10]");
  EXPECT_EQ(errorOf([&] { finiteNumber(member(j, "s", "t"), "t.s"); }),
            "t.s: expected a number, got string");
  EXPECT_EQ(errorOf([&] { stringValue(member(j, "i", "t"), "t.i"); }),
            "t.i: expected a string, got number");
  EXPECT_EQ(errorOf([&] { member(j, "nope", "t"); }), "t: missing field \"nope\"");
  EXPECT_EQ(errorOf([&] { member(member(j, "i", "t"), "x", "t.i"); }),
            "t.i: expected an object, got number");
  EXPECT_EQ(finiteNumber(member(j, "tiny", "t"), "t.tiny"), 0.0);  // underflow is just zero
}

TEST(JsonTest, DumpNeverThrowsOnBytesThatAreNotUtf8) {
  Json j = Json::object();
  j["error"] = std::string("rail \xff\xfe broke");
  std::string out;
  EXPECT_NO_THROW(out = dumpJson(j));
  EXPECT_NE(out.find("rail "), std::string::npos);
  EXPECT_NO_THROW(parseJson(out, "again"));
}

}  // namespace
}  // namespace nezha
