// The plugin's connection objects over loopback, driven the way NCCL's proxy drives them:
// helpers shared by the comm tests (comm_test.cc, rail_auth_test.cc).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nccl/recv_comm.h"
#include "nccl/send_comm.h"
#include "test_util.h"

namespace nezha::ncclnet::loopback {

using std::chrono::milliseconds;

inline PluginConfig loopbackConfig(size_t rails) {
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
  c.jobToken = nezha::testing::kTestToken;
  c.connectTimeout = milliseconds(5000);
  return c;
}

// A client socket connected to `a` from `srcIpv4` (network order; 0 = any); -1 with errno set
// when the connection is refused.
inline int connectFrom(const RailAddress& a, uint32_t srcIpv4) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = srcIpv4;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = a.ipv4;
  sa.sin_port = htons(a.port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// A client socket connected to a rail listener of the handle.
inline int dial(const RailAddress& a) {
  const int fd = connectFrom(a, 0);
  EXPECT_GE(fd, 0) << "connect: " << std::strerror(errno);
  return fd;
}

// True once the plugin closed our end (EOF or reset), checked while `pump` keeps it working.
template <typename Pump>
inline bool closedByPeer(int fd, Pump&& pump) {
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

inline Pair connectPair(PluginContext& ctx, ListenComm& listen) {
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
inline std::vector<uint8_t> roundTrip(Pair& p, const std::vector<uint8_t>& data, size_t capacity,
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

// Round trips until every rail of the pair has carried received bytes: connectPair() returns
// once one rail is live, and the others finish their handshakes meanwhile.
inline void waitAllRailsCarry(PluginContext& ctx, Pair& p) {
  const std::vector<uint8_t> data(64 << 10, 5);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  auto allCarried = [&] {
    for (size_t i = 0; i < ctx.config().rails.size(); ++i) {
      if (ctx.counters(i).bytesReceived == 0) return false;
    }
    return true;
  };
  for (int tag = 1000; !allCarried() && Clock::now() < deadline; ++tag) {
    ASSERT_EQ(roundTrip(p, data, data.size(), tag), data);
  }
  ASSERT_TRUE(allCarried()) << "not every rail carried data";
}

}  // namespace nezha::ncclnet::loopback
