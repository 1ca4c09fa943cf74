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

TEST(SignedHeader, RoundTripsTheOperationAndTheSignature) {
  std::string sig(kOpSignatureBytes, '\0');
  sig[0] = 'a';
  sig[kOpSignatureBytes - 1] = '\xff';
  const std::string bytes = encodeSignedHeader(SignedHeader{9, sig});
  ASSERT_EQ(bytes.size(), kSignedHeaderBytes);
  const SignedHeader h = decodeSignedHeader(bytes);
  EXPECT_EQ(h.op, 9u);
  EXPECT_EQ(h.signature, sig);
  // Another operation number decodes: the caller compares it with the signatures.
  EXPECT_EQ(decodeSignedHeader(encodeSignedHeader(SignedHeader{10, sig})).op, 10u);
}

TEST(SignedHeader, RefusesAnythingElseNamingTheField) {
  const std::string good = encodeSignedHeader(SignedHeader{3, std::string(kOpSignatureBytes, 'x')});
  auto refused = [](const std::string& bytes) {
    try {
      decodeSignedHeader(bytes);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string badMagic = good;
  badMagic[3] ^= 1;
  EXPECT_NE(refused(badMagic).find("magic"), std::string::npos) << refused(badMagic);
  // The unsigned header is not a signed one (an end that did not sign the operation).
  EXPECT_NE(refused(encodeOpHeader(OpHeader{3, 0}) + std::string(24, '\0')).find("NZOS"),
            std::string::npos);
  EXPECT_NE(refused(good.substr(0, kSignedHeaderBytes - 1)), "") << "a short header";
  EXPECT_NE(refused(good + "x").find("trailing"), std::string::npos) << "a long header";
  EXPECT_THROW(encodeSignedHeader(SignedHeader{3, "short"}), EnforceError);
}

}  // namespace
}  // namespace nezha
