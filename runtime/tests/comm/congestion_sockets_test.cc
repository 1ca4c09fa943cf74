// The rail sockets of a real in-process job run the congestion control NEZHA_TCP_CONGESTION
// resolves to (read back with getsockopt(TCP_CONGESTION)), by default too, and /status says which.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "base/congestion_control.h"
#include "base/json.h"
#include "control/http_client.h"
#include "test_util.h"

namespace nezha {
namespace {

using namespace control_client;  // NOLINT: the HTTP helpers

// IPv4 TCP sockets of this process that run `cc`.
int tcpSocketsRunning(const std::string& cc) {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    int type = 0, domain = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_INET) continue;
    char name[16] = {};
    len = sizeof name;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0 && cc == name) ++count;
  }
  return count;
}

void expectRailSocketsRun(const std::string& setting) {
  const std::string asked = setting.empty() ? Options().tcpCongestion : setting;
  const std::string want = resolveCongestionControl(asked, "test").algorithm;
  const int before = tcpSocketsRunning(want);
  auto comms = testing::makeJob(testing::jobOptions(2, 2, [&](Options& o) {
    if (!setting.empty()) o.tcpCongestion = setting;  // "" = the default Options
    o.controlAddr = "127.0.0.200:0";
  }));
  // Per rank and rail: streamsPerPeer (2) data connections plus the control connection.
  EXPECT_GE(tcpSocketsRunning(want) - before, 2 * 2 * 3) << want;
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
