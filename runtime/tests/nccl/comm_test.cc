// The plugin's connection objects over loopback (two "rails" on lo), driven the way NCCL's
// proxy drives them, with stray, garbled and impostor connections on the rail listeners.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "nccl/frame.h"
#include "nccl/recv_comm.h"
#include "nccl/send_comm.h"

namespace nezha::ncclnet {
namespace {

using std::chrono::milliseconds;

PluginConfig loopbackConfig(size_t rails) {
  PluginConfig c;
  for (size_t i = 0; i < rails; ++i) {
    PluginRail r;
    r.name = "lo" + std::to_string(i);
    r.iface = "lo";
    r.ip = "127.0.0.1";
    r.ipv4 = htonl(INADDR_LOOPBACK);
    c.rails.push_back(r);
  }
  c.chunkBytes = 4096;
  c.connectTimeout = milliseconds(5000);
  return c;
}

// A client socket connected to a rail listener of the handle.
int dial(const RailAddress& a) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = a.ipv4;
  sa.sin_port = htons(a.port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

// True once the plugin closed our end (EOF or reset), checked while `pump` keeps it working.
template <typename Pump>
bool closedByPeer(int fd, Pump&& pump) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    pump();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      char b[64];
      if (::recv(fd, b, sizeof b, MSG_DONTWAIT) <= 0) return true;
    }
  }
  return false;
}

struct Pair {
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
};

Pair connectPair(PluginContext& ctx, ListenComm& listen) {
  Pair p;
  p.send = std::make_unique<SendComm>(ctx, listen.handle());
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  bool sent = false;
  while ((!sent || !p.recv) && Clock::now() < deadline) {
    sent = sent || p.send->connected();
    if (!p.recv) p.recv = listen.accept();
  }
  EXPECT_TRUE(sent && p.recv) << "connect/accept did not complete";
  return p;
}

// Sends `data` as one message and receives it into a buffer of `capacity`; returns what arrived.
std::vector<uint8_t> roundTrip(Pair& p, const std::vector<uint8_t>& data, size_t capacity,
                               int tag) {
  std::vector<uint8_t> in(capacity, 0);
  void* dst = in.data();
  const uint64_t size = capacity;
  RecvRequest* rr = p.recv->irecv(1, &dst, &size, &tag);
  SendRequest* sr = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (sr == nullptr && Clock::now() < deadline) {
    sr = p.send->isend(data.data(), data.size(), tag);
    int ignored[1];
    // The receiver must keep going (its CTS) while the send waits; it cannot finish first.
    if (sr == nullptr && p.recv->test(rr, ignored)) {
      ADD_FAILURE() << "receive done before the send";
      return {};
    }
  }
  bool sdone = false, rdone = false;
  int sizes[1] = {-1};
  uint64_t sent = 0;
  while ((!sdone || !rdone) && Clock::now() < deadline) {
    if (!sdone) sdone = p.send->test(sr, &sent);
    if (!rdone) rdone = p.recv->test(rr, sizes);
  }
  EXPECT_TRUE(sdone && rdone);
  EXPECT_EQ(sent, data.size());
  EXPECT_EQ(sizes[0], static_cast<int>(data.size()));
  in.resize(data.size());
  return in;
}

TEST(NcclComm, StrayGarbledAndImpostorConnectionsCostNothing) {
  PluginContext ctx(loopbackConfig(2), nullptr);
  ListenComm listen(ctx);
  const auto& rails = listen.handle().rails;
  ASSERT_EQ(rails.size(), 2u);

  const int idle = dial(rails[0]);  // says nothing
  const int http = dial(rails[0]);  // speaks the wrong protocol
  const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(http, get, sizeof get - 1, 0), 0);
  const int impostor = dial(rails[1]);  // a well-formed HELLO with the wrong nonce
  Hello h;
  h.rail = 1;
  h.epoch = 1;
  h.nonce.fill(7);
  const std::string hello = encodeHello(h);
  ASSERT_GT(::send(impostor, hello.data(), hello.size(), 0), 0);
  const int misrouted = dial(rails[0]);  // the right nonce, but rail 1's HELLO on rail 0
  h.nonce = listen.handle().nonce;
  const std::string wrongRail = encodeHello(h);
  ASSERT_GT(::send(misrouted, wrongRail.data(), wrongRail.size(), 0), 0);

  auto pumpListen = [&] { EXPECT_EQ(listen.accept(), nullptr); };
  EXPECT_TRUE(closedByPeer(http, pumpListen));
  EXPECT_TRUE(closedByPeer(impostor, pumpListen));
  EXPECT_TRUE(closedByPeer(misrouted, pumpListen));

  // The real peer connects while the idle one still hangs around, and data flows exactly.
  Pair p = connectPair(ctx, listen);
  std::vector<uint8_t> data(50000);
  std::iota(data.begin(), data.end(), uint8_t{3});
  EXPECT_EQ(roundTrip(p, data, 60000, 5), data);
  // The idle connection is dropped after its HELLO deadline, without disturbing the comm.
  EXPECT_TRUE(closedByPeer(idle, [&] { EXPECT_EQ(roundTrip(p, data, 50000, 6), data); }));
  for (int fd : {idle, http, impostor, misrouted}) ::close(fd);
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

// Every IPv4 TCP socket this process holds that runs `cc` (each test runs in its own process).
int tcpSocketsRunning(const std::string& cc) {
  int count = 0;
  for (int fd = 0; fd < 1024; ++fd) {
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

TEST(NcclComm, RailSocketsRunTheCongestionControlAsked) {
  PluginConfig config = loopbackConfig(2);
  config.tcpCongestion = "reno";  // every kernel has it and lets every namespace use it
  PluginContext ctx(config, nullptr);
  ListenComm listen(ctx);
  Pair p = connectPair(ctx, listen);
  const std::vector<uint8_t> data(1 << 16, 7);
  EXPECT_EQ(roundTrip(p, data, data.size(), 1), data);
  // Per rail: the listener, the sender's socket and the accepted one.
  EXPECT_GE(tcpSocketsRunning("reno"), 6);
}

TEST(NcclComm, ACongestionControlTheKernelRefusesFailsInitNamingTheVariable) {
  setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
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
