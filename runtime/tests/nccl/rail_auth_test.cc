// The plugin's rail connections against an attacker on the rail network who has seen the
// connect handle (NCCL's bootstrap carries it in clear, nonce included): without the job token
// nothing it sends is accepted, even the epoch 0xffffffff that used to take a rail; a token
// holder is still held to the rail's next epoch; a live rail has no listener to attack; and a
// flood of pending connections cannot push out the sender's own (docs/security.md "NCCL plugin").
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "base/error.h"
#include "bootstrap/auth.h"
#include "nccl/comm_util.h"
#include "nccl/rail_purpose.h"

namespace nezha::ncclnet {
namespace {

using namespace loopback;  // NOLINT: the loopback helpers

constexpr char kOtherToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Runs the client side of the token handshake from another thread while `pump` drives the
// plugin (the plugin's listeners progress only when NCCL's proxy calls it); returns "" when the
// plugin accepted, else the client's error.
template <typename Pump>
std::string handshake(const RailAddress& at, const std::string& token, const RailPurpose& claim,
                      Pump&& pump) {
  const int fd = dial(at);
  std::string error;
  std::atomic<bool> done{false};
  std::thread client([&] {
    try {
      authenticateAsClient(fd, token, encodeRailPurpose(claim),
                           Clock::now() + std::chrono::seconds(5), 0, "the plugin");
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });
  while (!done) pump();  // the client's own deadline ends the loop at the latest
  client.join();
  ::close(fd);
  return error;
}

Nonce nonceOf(const ListenComm& l) { return l.handle().nonce; }

TEST(NcclRailAuth, TheHijackWithTheNonceAndEpochMaxIsRefusedAndChangesNothing) {
  PluginContext ctx(loopbackConfig(2), nullptr);
  ListenComm listen(ctx);
  const auto rails = listen.handle().rails;
  auto pumpListen = [&] { EXPECT_EQ(listen.accept(), nullptr); };

  // The attack as it used to work: the nonce, the rail, the epoch 0xffffffff — no token.
  const RailPurpose hijack{0, 0xffffffffu, nonceOf(listen)};
  EXPECT_NE(handshake(rails[0], kOtherToken, hijack, pumpListen), "");
  // The same with the rail's genuine next epoch: the token is what it lacks.
  EXPECT_NE(handshake(rails[0], kOtherToken, RailPurpose{0, 1, nonceOf(listen)}, pumpListen), "");
  // Even a holder of the token (a confused or stale sender) cannot jump epochs.
  EXPECT_NE(handshake(rails[1], nezha::testing::kTestToken,
                      RailPurpose{1, 0xffffffffu, nonceOf(listen)}, pumpListen),
            "");
  // Nor use another connection's nonce, nor another rail's listener.
  Nonce other = nonceOf(listen);
  other[0] ^= 1;
  EXPECT_NE(handshake(rails[1], nezha::testing::kTestToken, RailPurpose{1, 1, other}, pumpListen),
            "");
  EXPECT_NE(handshake(rails[1], nezha::testing::kTestToken, RailPurpose{0, 1, nonceOf(listen)},
                      pumpListen),
            "");

  // The genuine sender connects on both rails and its data arrives exactly.
  Pair p = connectPair(ctx, listen);
  std::vector<uint8_t> data(300000);
  std::iota(data.begin(), data.end(), uint8_t{11});
  EXPECT_EQ(roundTrip(p, data, data.size(), 1), data);
  waitAllRailsCarry(ctx, p);

  // Now the rails are live, their listeners are closed: the attacker's dial is refused outright.
  for (const RailAddress& a : rails) {
    EXPECT_EQ(connectFrom(a, 0), -1);
    EXPECT_EQ(errno, ECONNREFUSED);
  }
  // The receiver's data and both rails are as they were: more messages, exact, on both rails.
  const uint64_t before0 = ctx.counters(0).bytesReceived, before1 = ctx.counters(1).bytesReceived;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(roundTrip(p, data, data.size(), 2 + i), data);
  EXPECT_GT(ctx.counters(0).bytesReceived.load(), before0);
  EXPECT_GT(ctx.counters(1).bytesReceived.load(), before1);
  EXPECT_GE(p.recv->rejectedConnections(), 5u);
}

TEST(NcclRailAuth, ASenderWithAnotherTokenNeverConnects) {
  PluginContext ctx(loopbackConfig(1), nullptr);
  PluginConfig wrong = loopbackConfig(1);
  wrong.jobToken = kOtherToken;
  wrong.connectTimeout = milliseconds(1500);
  PluginContext attacker(wrong, nullptr);
  ListenComm listen(ctx);
  SendComm send(attacker, listen.handle());
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string error;
  while (error.empty() && Clock::now() < deadline) {
    EXPECT_EQ(listen.accept(), nullptr);
    try {
      EXPECT_FALSE(send.connected());
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  // The plugin proves the token first, so the sender learns it is talking to another job.
  EXPECT_NE(error.find("failed to prove NEZHA_JOB_TOKEN"), std::string::npos) << error;
}

TEST(NcclRailAuth, AFloodOfPendingConnectionsFromElsewhereDoesNotKeepTheSenderOut) {
  PluginContext ctx(loopbackConfig(1), nullptr);
  ListenComm listen(ctx);
  const RailAddress at = listen.handle().rails[0];
  // 40 connections from 127.0.0.2 that each sent a byte (so none is evictable as idle).
  std::vector<int> flood;
  for (int i = 0; i < 40; ++i) {
    const int fd = connectFrom(at, htonl(0x7f000002));
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::send(fd, "N", 1, 0), 1);
    flood.push_back(fd);
    // The plugin takes connections off the listen queue only when NCCL's proxy calls it.
    for (int k = 0; k < 3; ++k) EXPECT_EQ(listen.accept(), nullptr);
  }
  Pair p = connectPair(ctx, listen);
  const std::vector<uint8_t> data(10000, 9);
  EXPECT_EQ(roundTrip(p, data, data.size(), 1), data);
  // Beyond the per-source cap the flood was turned away.
  EXPECT_GE(p.recv->rejectedConnections(), 40u - RailAcceptor::kMaxPendingPerSource);
  for (int fd : flood) ::close(fd);
}

TEST(NcclRailAuth, RailPurposeRoundTripsAndRejectsAnythingElse) {
  RailPurpose p{3, 7, {}};
  for (size_t i = 0; i < p.nonce.size(); ++i) p.nonce[i] = static_cast<uint8_t>(i * 17);
  const std::string s = encodeRailPurpose(p);
  const auto back = decodeRailPurpose(s);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rail, 3);
  EXPECT_EQ(back->epoch, 7u);
  EXPECT_EQ(back->nonce, p.nonce);
  EXPECT_FALSE(decodeRailPurpose(s + " "));
  EXPECT_FALSE(decodeRailPurpose(s.substr(0, s.size() - 1)));
  EXPECT_FALSE(decodeRailPurpose("data rail=1 from=3 to=0 stream=1"));
  EXPECT_FALSE(decodeRailPurpose(encodeRailPurpose(RailPurpose{3, 0, p.nonce})));
  EXPECT_FALSE(decodeRailPurpose(encodeRailPurpose(RailPurpose{kMaxRails, 1, p.nonce})));
}

}  // namespace
}  // namespace nezha::ncclnet
