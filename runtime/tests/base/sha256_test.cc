// SHA-256 against FIPS 180-4 examples and HMAC-SHA256 against RFC 4231 test cases 1-4, 6, 7.
#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace nezha {
namespace {

std::string hexOf(const Digest& d) { return toHex(d.data(), d.size()); }

TEST(Sha256Test, FipsExamples) {
  EXPECT_EQ(hexOf(sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hexOf(sha256(two.data(), two.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, IncrementalUpdatesMatchOneShot) {
  std::string msg(1000, 'x');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 7);
  Sha256 s;
  for (size_t i = 0; i < msg.size(); i += 37)
    s.update(msg.data() + i, std::min<size_t>(37, msg.size() - i));
  EXPECT_EQ(hexOf(s.finish()), hexOf(sha256(msg.data(), msg.size())));
}

struct HmacCase {
  const char* name;
  std::string key, data, want;
};

class HmacRfc4231Test : public ::testing::TestWithParam<HmacCase> {};

TEST_P(HmacRfc4231Test, MatchesPublishedMac) {
  const HmacCase& c = GetParam();
  EXPECT_EQ(hexOf(hmacSha256(c.key.data(), c.key.size(), c.data.data(), c.data.size())), c.want);
}

std::string range1to25() {
  std::string s;
  for (int i = 1; i <= 25; ++i) s.push_back(static_cast<char>(i));
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Rfc4231, HmacRfc4231Test,
    ::testing::Values(
        HmacCase{"case1", std::string(20, '\x0b'), "Hi There",
                 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        HmacCase{"case2", "Jefe", "what do ya want for nothing?",
                 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        HmacCase{"case3", std::string(20, '\xaa'), std::string(50, '\xdd'),
                 "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        HmacCase{"case4", range1to25(), std::string(50, '\xcd'),
                 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        HmacCase{"case6", std::string(131, '\xaa'),
                 "Test Using Larger Than Block-Size Key - Hash Key First",
                 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        HmacCase{"case7", std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than "
                 "block-size data. The key needs to be hashed before being used by the HMAC "
                 "algorithm.",
                 "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"}),
    [](const ::testing::TestParamInfo<HmacCase>& i) { return std::string(i.param.name); });

TEST(ConstantTimeEqualTest, DetectsAnyDifference) {
  Digest a = sha256("a", 1), b = a;
  EXPECT_TRUE(constantTimeEqual(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(constantTimeEqual(a, b));
}

}  // namespace
}  // namespace nezha
