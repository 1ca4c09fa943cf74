// The plugin's connection objects over loopback (two "rails" on lo), driven the way NCCL's
// proxy drives them, with stray and garbled connections on the rail listeners.
#include <netinet/tcp.h>

#include <cstdlib>
#include <numeric>

#include "base/error.h"
#include "nccl/comm_util.h"
#include "nccl/frame.h"
#include "tcp_sockets.h"

namespace nezha::ncclnet {
namespace {

using namespace loopback;  // NOLINT: the loopback helpers
using nezha::testing::tcpSocketsRunning;

TEST(NcclComm, StrayAndGarbledConnectionsCostNothing) {
  PluginContext ctx(loopbackConfig(2), nullptr);
  ListenComm listen(ctx);
  const auto& rails = listen.handle().rails;
  ASSERT_EQ(rails.size(), 2u);

  const int idle = dial(rails[0]);  // says nothing
  const int http = dial(rails[0]);  // speaks the wrong protocol
  const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(http, get, sizeof get - 1, 0), 0);
  const int data = dial(rails[1]);  // skips the handshake: straight to a data frame
  DataHeader h;
  h.chunkBytes = kMinChunk;
  h.total = 1;
  const std::string frame = encodeDataHeader(h) + "x";
  ASSERT_GT(::send(data, frame.data(), frame.size(), 0), 0);

  auto pumpListen = [&] { EXPECT_EQ(listen.accept(), nullptr); };
  EXPECT_TRUE(closedByPeer(http, pumpListen));
  EXPECT_TRUE(closedByPeer(data, pumpListen));

  // The real peer connects while the idle one still hangs around, and data flows exactly.
  Pair p = connectPair(ctx, listen);
  std::vector<uint8_t> bytes(50000);
  std::iota(bytes.begin(), bytes.end(), uint8_t{3});
  EXPECT_EQ(roundTrip(p, bytes, 60000, 5), bytes);
  // The idle connection goes once the rail's listener closes (the rail is connected).
  EXPECT_TRUE(closedByPeer(idle, [&] { EXPECT_EQ(roundTrip(p, bytes, 50000, 6), bytes); }));
  EXPECT_GE(p.recv->rejectedConnections(), 2u);
  for (int fd : {idle, http, data}) ::close(fd);
}

TEST(NcclComm, MessagesOfEverySizeStripedOverTwoRails) {
  PluginContext ctx(loopbackConfig(2), nullptr);
  ListenComm listen(ctx);
  Pair p = connectPair(ctx, listen);
  for (size_t size :
       {size_t(0), size_t(1), size_t(4095), size_t(4096), size_t(4097), size_t(1 << 20)}) {
    std::vector<uint8_t> data(size);
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(i * 7 + size);
    EXPECT_EQ(roundTrip(p, data, size + 100, static_cast<int>(size % 1000)), data) << size;
  }
  EXPECT_GT(ctx.counters(0).bytesSent.load() + ctx.counters(1).bytesSent.load(), uint64_t(1) << 20);
}

TEST(NcclComm, RailSocketsRunTheCongestionControlAsked) {
  PluginConfig config = loopbackConfig(2);
  config.tcpCongestion = "reno";  // every kernel has it and lets every namespace use it
  PluginContext ctx(config, nullptr);
  ListenComm listen(ctx);
  Pair p = connectPair(ctx, listen);
  const std::vector<uint8_t> data(1 << 16, 7);
  EXPECT_EQ(roundTrip(p, data, data.size(), 1), data);
  // Per rail: the sender's socket and the accepted one, which inherited it from the listener
  // (closed now: a live rail has no listener).
  EXPECT_GE(tcpSocketsRunning("reno"), 4);
}

TEST(NcclComm, ACongestionControlTheKernelRefusesFailsInitNamingTheVariable) {
  setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
  setenv("NEZHA_JOB_TOKEN", nezha::testing::kTestToken, 1);
  setenv("NEZHA_TCP_CONGESTION", "nosuchcc", 1);
  try {
    PluginConfig::fromEnv();
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("NEZHA_TCP_CONGESTION=\"nosuchcc\""), std::string::npos)
        << e.what();
  }
  setenv("NEZHA_TCP_CONGESTION", "reno", 1);
  EXPECT_EQ(PluginConfig::fromEnv().tcpCongestion, "reno");
  unsetenv("NEZHA_TCP_CONGESTION");
  unsetenv("NEZHA_RAILS");
  unsetenv("NEZHA_JOB_TOKEN");
}

TEST(NcclComm, ASendLargerThanTheReceiveIsAnErrorNotATruncation) {
  PluginContext ctx(loopbackConfig(1), nullptr);
  ListenComm listen(ctx);
  Pair p = connectPair(ctx, listen);
  std::vector<uint8_t> in(100);
  void* dst = in.data();
  const uint64_t size = in.size();
  int tag = 9;
  ASSERT_NE(p.recv->irecv(1, &dst, &size, &tag), nullptr);
  std::vector<uint8_t> big(101);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  try {
    while (Clock::now() < deadline) {
      if (p.send->isend(big.data(), big.size(), tag) != nullptr) break;
    }
    ADD_FAILURE() << "a 101-byte send into a 100-byte receive was accepted";
  } catch (const CommError& e) {
    EXPECT_EQ(e.code, ncclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("into a receive of 100 bytes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nezha::ncclnet
