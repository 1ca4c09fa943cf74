// The pre-flight check's pieces: which peers a rank checks (the start-up set), what a transfer
// reports for data that is missing or wrong, and the error text. The whole check runs for real in
// control_test (in-process job) and the test bed's run_failover.sh (black-holed rail before the
// start, every NEZHA_PREFLIGHT policy).
#include "preflight/preflight.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "transport/peer_set.h"

namespace nezha {
namespace {

// Pre-flight checks exactly the pairs a rail connects at start-up, at every N (the set's own
// properties are tested in transport/peer_set_test.cc).
TEST(PreflightPeersTest, ChecksExactlyTheStartUpSet) {
  for (int n : {1, 2, 3, 5, 8, 16, 17, 64, 100, 1024}) {
    for (int r = 0; r < n; ++r) EXPECT_EQ(preflightPeers(r, n), peersUsed(r, n)) << r << "/" << n;
  }
  // Beyond four ranks the set is smaller than all pairs (the rule up to 16 ranks is gone).
  EXPECT_LT(preflightPeers(0, 16).size(), 15u);
}

// A channel double that delivers, per peer, the right bytes, one wrong byte, or half the bytes
// and then a rail failure — what a healthy pair, a corrupting path and a black hole look like.
class ScriptedChannel : public Channel {
 public:
  int rank() const override { return 0; }
  int size() const override { return 4; }
  int railIndex() const override { return 1; }
  const std::string& name() const override { return name_; }
  void exchange(std::vector<IoOp>& ops) override {
    bool fail = false;
    for (IoOp& op : ops) {
      if (op.kind != IoOp::kRecv) continue;
      auto* buf = static_cast<unsigned char*>(op.buf);
      size_t len = op.len;
      for (size_t b = 0; b < len; ++b) buf[b] = preflightByte(op.peer, 0, 1, b);
      if (op.peer == 2) buf[5] ^= 1;
      if (op.peer == 3) {
        len /= 2;
        fail = true;
      }
      op.onRecv(0, len);
    }
    if (fail) throw RailError(1, "rail r1: no progress for 1000 ms");
  }
  void abort() override {}
  void setProgressTimeout(std::chrono::milliseconds) override {}
  void setPeersStillComing(std::function<bool()>) override {}
  void setProgressWatch(ProgressWatch) override {}

 private:
  std::string name_ = "r1";
};

TEST(PreflightTransferTest, NamesPeersWhoseBytesAreMissingOrWrong) {
  ScriptedChannel ch;
  const std::vector<PreflightFailure> f = checkTransfers(ch, {1, 2, 3}, 4096);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].peer, 2);
  EXPECT_EQ(f[0].rail, 1);
  EXPECT_EQ(f[0].reason, "transfer: byte 5 of 4096 arrived wrong");
  EXPECT_EQ(f[1].peer, 3);
  EXPECT_EQ(f[1].reason, "transfer: 2048 of 4096 bytes arrived (rail r1: no progress for 1000 ms)");
  EXPECT_TRUE(checkTransfers(ch, {1}, 4096).empty());
}

TEST(PreflightTransferTest, PatternDependsOnDirectionRailAndOffset) {
  int same = 0;
  for (size_t b = 0; b < 1024; ++b) {
    same += preflightByte(0, 1, 0, b) == preflightByte(1, 0, 0, b);
    same += preflightByte(0, 1, 0, b) == preflightByte(0, 1, 1, b);
    same += preflightByte(0, 1, 0, b) == preflightByte(0, 1, 0, b + 1);
  }
  EXPECT_LT(same, 3 * 1024 / 64);  // ~1/256 by chance each
}

TEST(PreflightTest, PolicyParsingAndDescription) {
  EXPECT_EQ(parsePreflightPolicy("wait"), PreflightPolicy::kWait);
  EXPECT_STREQ(toString(PreflightPolicy::kDegrade), "degrade");
  try {
    parsePreflightPolicy("maybe");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "NEZHA_PREFLIGHT=\"maybe\" is unknown (want fail, degrade, wait or off)");
  }
  std::vector<PreflightFailure> f = {
      {2, 1, 0, "connect: timed out"}, {0, 1, 2, ""}, {1, 0, -1, "x"}};
  EXPECT_EQ(describeFailures(f, {"r0", "r1"}),
            "rail r1: rank 2 -> rank 0 (connect: timed out); rail r1: rank 0 -> rank 2; "
            "rail r0: rank 1 -> a peer (x)");
  EXPECT_EQ(describeFailures(f, {"r0", "r1"}, 1),
            "rail r1: rank 2 -> rank 0 (connect: timed out); and 2 more");
}

}  // namespace
}  // namespace nezha
