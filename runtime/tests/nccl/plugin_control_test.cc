// The NCCL plugin's control endpoint over real HTTP: the same routes and verdicts as the
// runtime's (control/rail_routes.h), and a signed drain/restore reaching a live connection's
// engine (PluginContext::setDrained -> EngineLink::request) on both ends, with every message
// exact throughout and the runtime's metric names on /metrics.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/http_client.h"
#include "nccl/pending_link.h"
#include "nccl/plugin_context.h"
#include "test_util.h"

namespace nezha::ncclnet {
namespace {

using namespace nezha::control_client;  // NOLINT: the HTTP helpers

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;

// Two loopback rails; equal shares held (no bandwidth probe, no tuning), so which rails carry a
// message depends only on the drains the test makes.
PluginConfig twoRailConfig() {
  PluginConfig c;
  for (const RailSpec& spec : nezha::testing::loopbackRails(2)) {
    c.rails.push_back(PluginRail{spec.name, spec.iface, spec.address, 0, 10000});
    c.engine.rails.push_back(spec);
    c.engine.rails.back().expectedMbps = 10000;
  }
  c.jobToken = nezha::testing::kTestToken;
  c.engine.jobToken = c.jobToken;
  c.engine.ioTimeout = std::chrono::milliseconds(20000);
  c.engine.probeBytes = 0;
  c.engine.tuneInterval = 1 << 30;
  c.engine.coldThreshold = 64 << 10;
  c.controlAddr = "127.0.0.200:0";
  return c;
}

// Both ends of one connection, set up as listen() and connect() set it up, polled as NCCL
// polls accept() and connect().
std::array<std::unique_ptr<EngineLink>, 2> connectLinks(const PluginConfig& c) {
  ConnectHandle handle;
  const auto timeout = std::chrono::milliseconds(20000);
  auto listening = PendingLink::listen(c.engine, timeout, handle);
  auto connecting = PendingLink::connect(c.engine, timeout, handle);
  std::array<std::unique_ptr<EngineLink>, 2> links;
  while (!links[kS] || !links[kR]) {
    if (!links[kR]) links[kR] = listening->take();
    if (!links[kS]) links[kS] = connecting->take();
    std::this_thread::yield();
  }
  return links;
}

// One 2 MiB message, exact; returns how many rails carried it (the sender's count).
int sendOne(std::array<std::unique_ptr<EngineLink>, 2>& links, int m) {
  std::vector<uint8_t> out(2 << 20), in(out.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(m * 31 + i * 7);
  const uint64_t sid = links[kS]->post(out.data(), out.size());
  const uint64_t rid = links[kR]->post(in.data(), in.size());
  uint64_t bytes = 0;
  int rails = 0;
  while (!links[kS]->test(sid, &bytes, &rails)) std::this_thread::yield();
  while (!links[kR]->test(rid, &bytes)) std::this_thread::yield();
  EXPECT_EQ(in, out) << "message " << m;
  return rails;
}

TEST(NcclPluginControl, SignedDrainAndRestoreSteerALiveConnection) {
  PluginContext ctx(twoRailConfig(), nullptr);
  ctx.startControl();
  const int port = ctx.controlPort();
  ASSERT_GT(port, 0);
  auto links = connectLinks(ctx.config());
  for (auto& link : links) ctx.attach(link.get());
  EXPECT_EQ(sendOne(links, 0), 2);
  EXPECT_NE(http(port, "GET", "/status").find("\"drained\":false"), std::string::npos);

  // Unsigned, or signed with another job's token: refused before the rail is looked at.
  EXPECT_NE(http(port, "POST", "/rails/r0/drain").find("401"), std::string::npos);
  const std::string other =
      controlCredential("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_NE(http(port, "POST", "/rails/r0/drain", other).find("401"), std::string::npos);
  EXPECT_NE(http(port, "POST", "/rails/nope/drain", kCredential).find("404"), std::string::npos);
  EXPECT_NE(http(port, "GET", "/rails/r0/drain").find("405"), std::string::npos);

  const std::string drained = http(port, "POST", "/rails/r0/drain", kCredential);
  EXPECT_NE(drained.find("202"), std::string::npos) << drained;
  EXPECT_TRUE(ctx.drained(0));
  // The last rail cannot be drained.
  EXPECT_NE(http(port, "POST", "/rails/r1/drain", kCredential).find("409"), std::string::npos);
  // The next message's round applies the drain on both ends; the one after runs on r1 alone.
  sendOne(links, 1);
  const uint64_t r0Before = links[kS]->counters().railBytes[0];
  EXPECT_EQ(sendOne(links, 2), 1);
  EXPECT_EQ(links[kS]->counters().railBytes[0], r0Before);
  for (auto& link : links) EXPECT_EQ(link->railState(0), "drained");
  const std::string metrics = body(http(port, "GET", "/metrics"));
  EXPECT_NE(metrics.find("nezha_runtime_drains_total{"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("reason=\"operator\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("local_rank=\"0\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("nezha_runtime_rail_bytes_total{"), std::string::npos) << metrics;
  EXPECT_NE(http(port, "GET", "/status").find("\"drained\":true"), std::string::npos);

  EXPECT_NE(http(port, "POST", "/rails/r0/restore", kCredential).find("202"), std::string::npos);
  EXPECT_FALSE(ctx.drained(0));
  sendOne(links, 3);
  EXPECT_EQ(sendOne(links, 4), 2);
  for (auto& link : links) EXPECT_EQ(link->railState(0), "healthy");
  for (auto& link : links) ctx.detach(link.get());
  // Closed connections still count.
  EXPECT_NE(ctx.statsJson().find("\"bytes_received\":"), std::string::npos);
  EXPECT_NE(body(http(port, "GET", "/metrics")).find("reason=\"operator\""), std::string::npos);
}

// /status says which process of its pod this plugin is and how many share the pod, read as torchrun
// sets them (LOCAL_RANK, LOCAL_WORLD_SIZE) unless the NEZHA_ names are set: the operator probes
// ports base + 1 .. base + local_world_size - 1 for the others (docs/nccl.md "Steering").
TEST(NcclPluginControl, StatusNamesTheProcessAndHowManyShareThePod) {
  setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
  setenv("NEZHA_JOB_TOKEN", nezha::testing::kTestToken, 1);
  auto statusOf = [] { return PluginContext(PluginConfig::fromEnv(), nullptr).statsJson(); };
  EXPECT_NE(statusOf().find("\"local_rank\":0,\"local_world_size\":1}"), std::string::npos)
      << statusOf();
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_NE(statusOf().find("\"local_rank\":1,\"local_world_size\":2}"), std::string::npos)
      << statusOf();
  setenv("NEZHA_LOCAL_WORLD_SIZE", "8", 1);
  EXPECT_NE(statusOf().find("\"local_world_size\":8}"), std::string::npos) << statusOf();
  for (const char* bad : {"0", "two", "4097"}) {
    setenv("NEZHA_LOCAL_WORLD_SIZE", bad, 1);
    try {
      PluginConfig::fromEnv();
      ADD_FAILURE() << "NEZHA_LOCAL_WORLD_SIZE=" << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("NEZHA_LOCAL_WORLD_SIZE"), std::string::npos)
          << e.what();
    }
  }
  for (const char* v : {"NEZHA_RAILS", "NEZHA_JOB_TOKEN", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                        "NEZHA_LOCAL_WORLD_SIZE"})
    unsetenv(v);
}

}  // namespace
}  // namespace nezha::ncclnet
