// The rail sockets of a real in-process job run the congestion control NEZHA_TCP_CONGESTION
// resolves to (read back with getsockopt(TCP_CONGESTION)), by default too, and /status says which.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/congestion_control.h"
#include "base/json.h"
#include "control/http_client.h"
#include "tcp_sockets.h"
#include "test_util.h"

namespace nezha {
namespace {

using namespace control_client;  // NOLINT: the HTTP helpers

void expectRailSocketsRun(const std::string& setting) {
  const std::string asked = setting.empty() ? Options().tcpCongestion : setting;
  const std::string want = resolveCongestionControl(asked, "test").algorithm;
  const int before = testing::tcpSocketsRunning(want);
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [&](Options& o) {
    if (!setting.empty()) o.tcpCongestion = setting;  // "" = the default Options
    o.controlAddr = "127.0.0.200:0";
  }));
  // Per rank and rail: streamsPerPeer (2) data connections plus the control connection.
  EXPECT_GE(testing::tcpSocketsRunning(want) - before, 2 * 2 * 3) << want;
  testing::runRanks(2, [&](int r) {
    std::vector<float> buf(1024, 1.0f);
    comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  });
  const Json st = parseJson(body(http(comms[0]->controlPort(), "GET", "/status")), "status");
  EXPECT_EQ(st.at("tcp_congestion_control").at("algorithm"), want);
  EXPECT_EQ(st.at("tcp_congestion_control").at("setting"), asked);
}

TEST(CongestionSocketsTest, ByDefaultRailSocketsRunTheAutoChoice) {
  EXPECT_EQ(Options().tcpCongestion, "auto");
  expectRailSocketsRun("");
}

TEST(CongestionSocketsTest, HostKeepsTheHostsDefault) { expectRailSocketsRun("host"); }

}  // namespace
}  // namespace nezha
