// The engine's per-operation header (failover/op_header.h): it round-trips, and a header that
// is not one, or names another operation, is refused naming the field.
#include "failover/op_header.h"

#include <gtest/gtest.h>

#include <string>

#include "nezha/nezha.hpp"

namespace nezha {
namespace {

// The decoder's error message, or "" when it accepted the bytes.
std::string refusal(const std::string& bytes, uint64_t expectedOp) {
  std::string why;
  try {
    decodeOpHeader(bytes, expectedOp);
  } catch (const Error& e) {
    why = e.what();
  }
  return why;
}

TEST(OpHeader, RoundTripsAtItsFixedSize) {
  const std::string bytes = encodeOpHeader(OpHeader{7, (uint64_t{1} << 40) + 3});
  ASSERT_EQ(bytes.size(), kOpHeaderBytes);
  const OpHeader h = decodeOpHeader(bytes, 7);
  EXPECT_EQ(h.op, 7u);
  EXPECT_EQ(h.value, (uint64_t{1} << 40) + 3);
}

TEST(OpHeader, RefusesAnythingElseNamingTheField) {
  const std::string good = encodeOpHeader(OpHeader{7, 100});
  std::string badMagic = good;
  badMagic[0] ^= 1;
  EXPECT_NE(refusal(badMagic, 7).find("magic"), std::string::npos) << refusal(badMagic, 7);
  EXPECT_NE(refusal(good, 8).find("op 7 from the peer, but this rank is in op 8"),
            std::string::npos)
      << refusal(good, 8);
  EXPECT_NE(refusal(good.substr(0, kOpHeaderBytes - 1), 7), "") << "a short header";
  EXPECT_NE(refusal(good + "x", 7), "") << "a long header";
}

}  // namespace
}  // namespace nezha
