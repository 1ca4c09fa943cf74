// Signed control requests (control/request_auth.h) as an attacker who sniffed one would try
// them: replayed, replayed late, moved to another rail or action, signed with a guessed key.
#include "control/request_auth.h"

#include <gtest/gtest.h>

#include <string>

#include "bootstrap/auth.h"

namespace nezha {
namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kNonce = "00112233445566778899aabbccddeeff";
constexpr int64_t kNow = 1700000000;

// The operator signs the same vector in Go (operator/internal/prober/http_test.go
// TestSignRequestMatchesTheRuntimesVector): a change on one side alone breaks one test.
TEST(RequestAuthTest, MatchesTheOperatorsVector) {
  EXPECT_EQ(signControlRequest(controlCredential(kToken), "POST", "/rails/r1/drain", kNow, kNonce),
            "Nezha-HMAC-SHA256 ts=1700000000, nonce=00112233445566778899aabbccddeeff, "
            "sig=ca740fdd1c3209a52ec73220e0d1b8868cb7d4c0542354d49374e730dc4e8f3e");
}

TEST(RequestAuthTest, AValidRequestIsAcceptedOnceAndItsReplayRefused) {
  ControlRequestVerifier v;
  const std::string cred = controlCredential(kToken);
  const std::string auth = signControlRequest(cred, "POST", "/rails/r1/drain", kNow, kNonce);
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain", auth, kNow), "");
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain", auth, kNow + 1),
            "replayed request: this nonce was already used");
  // Still refused at the far edge of the window, and once the window has passed it is stale.
  EXPECT_NE(v.check(cred, "POST", "/rails/r1/drain", auth, kNow + 30), "");
  EXPECT_NE(v.check(cred, "POST", "/rails/r1/drain", auth, kNow + 31).find("stale request"),
            std::string::npos);
  // A fresh nonce is a new request.
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain",
                    signControlRequest(cred, "POST", "/rails/r1/drain", kNow, kNonce + "00"), kNow),
            "");
}

TEST(RequestAuthTest, StaleOrFutureTimestampsAreRefused) {
  ControlRequestVerifier v;
  const std::string cred = controlCredential(kToken);
  for (int64_t skew : {-3600, -31, 31, 3600}) {
    const std::string auth =
        signControlRequest(cred, "POST", "/rails/r1/drain", kNow + skew, kNonce);
    const std::string why = v.check(cred, "POST", "/rails/r1/drain", auth, kNow);
    EXPECT_NE(why.find("stale request"), std::string::npos) << skew << ": " << why;
  }
  // Inside the window (clocks a little apart) it passes.
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain",
                    signControlRequest(cred, "POST", "/rails/r1/drain", kNow - 29, kNonce), kNow),
            "");
}

TEST(RequestAuthTest, WrongSignaturesAreRefused) {
  ControlRequestVerifier v;
  const std::string cred = controlCredential(kToken);
  const std::string auth = signControlRequest(cred, "POST", "/rails/r1/drain", kNow, kNonce);
  const std::string wrong = "wrong signature for this job's control endpoint";
  // Moved to another rail, another action, another method.
  EXPECT_EQ(v.check(cred, "POST", "/rails/r0/drain", auth, kNow), wrong);
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/restore", auth, kNow), wrong);
  EXPECT_EQ(v.check(cred, "PUT", "/rails/r1/drain", auth, kNow), wrong);
  // Signed with another job's credential, or with the token itself.
  const std::string other = controlCredential(std::string(64, 'f'));
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain",
                    signControlRequest(other, "POST", "/rails/r1/drain", kNow, kNonce), kNow),
            wrong);
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain",
                    signControlRequest(kToken, "POST", "/rails/r1/drain", kNow, kNonce), kNow),
            wrong);
  // A changed timestamp with the old signature (to dodge the window) breaks the signature.
  std::string shifted = auth;
  shifted.replace(shifted.find("1700000000"), 10, "1700000020");
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain", shifted, kNow + 20), wrong);
  // None of the refused ones spent the nonce: the genuine request still passes.
  EXPECT_EQ(v.check(cred, "POST", "/rails/r1/drain", auth, kNow), "");
}

TEST(RequestAuthTest, MalformedHeadersNameWhatIsWrong) {
  ControlRequestVerifier v;
  const std::string cred = controlCredential(kToken);
  for (const std::string& bad :
       {std::string("Bearer ") + cred, std::string("Nezha-HMAC-SHA256 ts=1, nonce=2"),
        std::string("Nezha-HMAC-SHA256 ts=1, ts=1, nonce=2, sig=3"),
        std::string("Nezha-HMAC-SHA256 ts=1, nonce=2, sig=3, x=4"), std::string("")}) {
    EXPECT_NE(v.check(cred, "POST", "/p", bad, kNow).find("malformed Authorization"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(
      v.check(cred, "POST", "/p", "Nezha-HMAC-SHA256 ts=-5, nonce=" + kNonce + ", sig=0", kNow)
          .find("ts is not unix seconds"),
      std::string::npos);
  EXPECT_NE(v.check(cred, "POST", "/p", "Nezha-HMAC-SHA256 ts=5, nonce=abc, sig=0", kNow)
                .find("nonce must be"),
            std::string::npos);
}

}  // namespace
}  // namespace nezha
