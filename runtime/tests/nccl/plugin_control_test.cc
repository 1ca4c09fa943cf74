// The NCCL plugin's control endpoint over real HTTP: the same routes and verdicts as the
// runtime's (control/rail_routes.h), and a signed drain/restore taking a rail out of a live
// connection and bringing it back, with every message exact throughout.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "control/http_client.h"
#include "nccl/comm_util.h"

namespace nezha::ncclnet {
namespace {

using namespace loopback;               // NOLINT: the loopback helpers
using namespace nezha::control_client;  // NOLINT: the HTTP helpers

// Round trips until `rail` carries received bytes again (a restored rail redials, proves the
// token, passes its probe); false if it does not within the bound.
bool carriesAgain(PluginContext& ctx, Pair& p, size_t rail, const std::vector<uint8_t>& data) {
  const uint64_t before = ctx.counters(rail).bytesReceived;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int tag = 100; Clock::now() < deadline; ++tag) {
    EXPECT_EQ(roundTrip(p, data, data.size(), tag), data);
    if (ctx.counters(rail).bytesReceived > before) return true;
  }
  return false;
}

TEST(NcclPluginControl, SignedDrainAndRestoreSteerALiveConnection) {
  PluginConfig config = loopbackConfig(2);
  config.controlAddr = "127.0.0.200:0";
  PluginContext ctx(config, nullptr);
  ctx.startControl();
  const int port = ctx.controlPort();
  ASSERT_GT(port, 0);
  ListenComm listen(ctx);
  Pair p = connectPair(ctx, listen);
  std::vector<uint8_t> data(200000);
  std::iota(data.begin(), data.end(), uint8_t{1});
  EXPECT_EQ(roundTrip(p, data, data.size(), 1), data);
  waitAllRailsCarry(ctx, p);

  EXPECT_NE(http(port, "GET", "/status").find("\"drained\":false"), std::string::npos);
  // Unsigned, or signed with another job's token: refused before the rail is looked at.
  EXPECT_NE(http(port, "POST", "/rails/lo0/drain").find("401"), std::string::npos);
  const std::string other =
      controlCredential("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_NE(http(port, "POST", "/rails/lo0/drain", other).find("401"), std::string::npos);
  EXPECT_NE(http(port, "POST", "/rails/nope/drain", kCredential).find("404"), std::string::npos);
  EXPECT_NE(http(port, "GET", "/rails/lo0/drain").find("405"), std::string::npos);

  const std::string drained = http(port, "POST", "/rails/lo0/drain", kCredential);
  EXPECT_NE(drained.find("202"), std::string::npos) << drained;
  EXPECT_NE(drained.find("\"action\":\"drain\""), std::string::npos) << drained;
  EXPECT_TRUE(ctx.drained(0));
  // The last rail cannot be drained.
  EXPECT_NE(http(port, "POST", "/rails/lo1/drain", kCredential).find("409"), std::string::npos);
  EXPECT_FALSE(ctx.drained(1));

  // Messages go on exactly, on rail lo1 alone (the first may still have had bytes on lo0).
  EXPECT_EQ(roundTrip(p, data, data.size(), 2), data);
  const uint64_t on0 = ctx.counters(0).bytesReceived, on1 = ctx.counters(1).bytesReceived;
  for (int tag = 3; tag < 8; ++tag) EXPECT_EQ(roundTrip(p, data, data.size(), tag), data);
  EXPECT_EQ(ctx.counters(0).bytesReceived.load(), on0);
  EXPECT_GT(ctx.counters(1).bytesReceived.load(), on1);
  EXPECT_NE(body(http(port, "GET", "/metrics")).find("nezha_nccl_rail_drained{"),
            std::string::npos);
  EXPECT_NE(http(port, "GET", "/status").find("\"drained\":true"), std::string::npos);

  EXPECT_NE(http(port, "POST", "/rails/lo0/restore", kCredential).find("202"), std::string::npos);
  EXPECT_FALSE(ctx.drained(0));
  EXPECT_TRUE(carriesAgain(ctx, p, 0, data));
  EXPECT_GE(ctx.counters(0).readmissions.load(), 1u);
}

}  // namespace
}  // namespace nezha::ncclnet
