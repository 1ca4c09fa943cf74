// Listeners that anyone on the network can reach (rendezvous, rail ports) survive stray, idle
// and garbage connections: real kernel sockets on loopback, real handshakes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "bootstrap/rendezvous.h"
#include "test_util.h"
#include "transport/tcp/tcp_channel.h"

namespace nezha {
namespace {

using namespace std::chrono_literals;

// A raw TCP client to 127.0.0.1:port (no handshake).
Fd rawConnect(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void sendRaw(const Fd& fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// The four kinds of stray client a port open to the network sees; the idle ones stay open
// (returned).
std::vector<Fd> strayClients(int port, int idle) {
  std::vector<Fd> keep;
  rawConnect(port).reset();  // closes at once
  Fd http = rawConnect(port);
  sendRaw(http, "GET /status HTTP/1.1\r\nHost: x\r\n\r\n");
  keep.push_back(std::move(http));
  Fd junk = rawConnect(port);
  std::string noise(300, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 7919 + 13) & 0xff);
  sendRaw(junk, noise);
  keep.push_back(std::move(junk));
  for (int i = 0; i < idle; ++i) keep.push_back(rawConnect(port));
  return keep;
}

TEST(HandshakeAcceptorTest, StrayClientsCostOnlyTheirOwnDeadline) {
  const std::string token = testing::kTestToken;
  Fd listen = listenOn("127.0.0.1", 0, "");
  const int port = localPort(listen.get());
  HandshakeAcceptor::Options ao;
  ao.listener = "test";
  ao.perConnection = 60s;  // far longer than the test: idle clients must not be waited for
  HandshakeAcceptor acceptor(listen.get(), token, ao);
  std::vector<Fd> strays = strayClients(port, 5);

  std::thread client([&] {
    Fd fd = connectTo("127.0.0.1", port, "", "", Clock::now() + 10s, -1, "test");
    authenticateAsClient(fd.get(), token, "the real peer", Clock::now() + 10s, -1, "test");
  });
  const auto t0 = Clock::now();
  AcceptedPeer peer = acceptor.next(Clock::now() + 20s, -1, "test");
  client.join();
  EXPECT_EQ(peer.purpose, "the real peer");
  EXPECT_TRUE(peer.fd.valid());
  // Not a timing assertion on speed: idle clients would hold it for their 60 s deadline.
  EXPECT_LT(Clock::now() - t0, 30s);
  EXPECT_EQ(acceptor.rejected().count("idle"), 0u);  // idle ones were not waited for
}

TEST(HandshakeAcceptorTest, CountsEveryKindOfRejection) {
  const std::string token = testing::kTestToken;
  Fd listen = listenOn("127.0.0.1", 0, "");
  const int port = localPort(listen.get());
  HandshakeAcceptor::Options ao;
  ao.listener = "test";
  ao.perConnection = 300ms;
  HandshakeAcceptor acceptor(listen.get(), token, ao);
  std::vector<Fd> strays = strayClients(port, 2);
  std::thread impostor([&] {
    Fd fd = connectTo("127.0.0.1", port, "", "", Clock::now() + 10s, -1, "test");
    try {
      authenticateAsClient(fd.get(), std::string(64, 'f'), "impostor", Clock::now() + 10s, -1, "t");
    } catch (const AuthError&) {
      // expected: the server's proof does not match this token
    }
  });
  // Nobody real comes: the call times out, but only after every stray was dealt with.
  EXPECT_THROW(acceptor.next(Clock::now() + 2s, -1, "test"), RailError);
  impostor.join();
  const auto& r = acceptor.rejected();
  EXPECT_EQ(r.count("closed") ? r.at("closed") : 0, 1u);
  EXPECT_EQ(r.count("garbage") ? r.at("garbage") : 0, 2u);  // HTTP + random bytes
  EXPECT_EQ(r.count("idle") ? r.at("idle") : 0, 2u);
  EXPECT_EQ(r.count("wrong token") ? r.at("wrong token") : 0, 1u);
  EXPECT_EQ(acceptor.rejectedTotal(), 6u);
}

// Another thread stops a wait by shutting the listening socket down (the torch backend's p2p
// setup does when its own dialing fails): next() ends at once with a RailError saying so,
// whether the shutdown came before or during the wait, instead of spinning until its deadline.
TEST(HandshakeAcceptorTest, ShuttingDownTheListenerEndsTheWait) {
  const std::string token = testing::kTestToken;
  Fd listen = listenOn("127.0.0.1", 0, "");
  HandshakeAcceptor::Options ao;
  ao.listener = "test";
  HandshakeAcceptor acceptor(listen.get(), token, ao);
  std::thread stopper([&] { ::shutdown(listen.get(), SHUT_RDWR); });
  try {
    acceptor.next(Clock::now() + 120s, -1, "test");
    ADD_FAILURE() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("the listening socket was shut down"), std::string::npos)
        << e.what();
  }
  stopper.join();
}

// 100 idle connections to the rendezvous port do not stop a 64-rank job from forming (the
// rendezvous step of it: 64 registrations, each rank gets the full table).
TEST(RendezvousListenerTest, HundredIdleConnectionsDoNotStopSixtyFourRanks) {
  constexpr int kRanks = 64;
  std::vector<Options> opts = testing::jobOptions(
      kRanks, 1, [](Options& o) { o.rendezvousTimeout = std::chrono::milliseconds(60000); });
  const int port = opts[0].rendezvousPort;
  std::vector<Fd> strays = strayClients(port, 100);
  std::vector<JobTable> tables(kRanks);
  testing::runRanks(kRanks, [&](int r) {
    RankInfo mine;
    mine.rank = r;
    mine.worldSize = kRanks;
    mine.fingerprint = configFingerprint(opts[r]);
    mine.rails.push_back({"r0", "tcp", "127.0.0.1", 1000 + r});
    tables[r] = rendezvous(opts[r], mine);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(tables[r].ranks.size(), static_cast<size_t>(kRanks));
    EXPECT_EQ(tables[r].ranks[kRanks - 1].rails[0].port, 1000 + kRanks - 1);
    EXPECT_EQ(tables[r].session, tables[0].session);
  }
  // The HTTP and garbage clients were turned away (counted as the server gets to them).
  const auto until = Clock::now() + 10s;
  while (opts[0].server->rejectedConnections() < 2 && Clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(opts[0].server->rejectedConnections(), 2u);
}

// A rail's listener: strays arriving before the real peers neither abort nor stall connect().
TEST(RailListenerTest, StrayConnectionsDoNotBreakRailSetup) {
  std::vector<Options> opts = testing::jobOptions(2, 1);
  std::vector<std::unique_ptr<TcpChannel>> ch;
  for (int r = 0; r < 2; ++r) ch.push_back(std::make_unique<TcpChannel>(opts[r], 0, "127.0.0.1"));
  JobTable job;
  job.session = "s";
  for (int r = 0; r < 2; ++r) {
    RankInfo ri;
    ri.rank = r;
    ri.rails.push_back(ch[r]->endpoint());
    job.ranks.push_back(ri);
  }
  // Rank 0 accepts (rank 1 dials it): spray rank 0's listener first.
  std::vector<Fd> strays = strayClients(ch[0]->endpoint().port, 3);
  testing::runRanks(2, [&](int r) { ch[r]->connect(job, Clock::now() + 20s); });
  EXPECT_GE(ch[0]->rejectedConnections(), 2u);
  // The rail works.
  std::vector<int32_t> a{1, 2, 3}, b{0, 0, 0};
  testing::runRanks(2, [&](int r) {
    std::vector<IoOp> ops;
    if (r == 0) ops.push_back(IoOp::send(1, a.data(), a.size() * 4, 4));
    if (r == 1) ops.push_back(IoOp::recv(0, b.data(), b.size() * 4, 4));
    ch[r]->exchange(ops);
  });
  EXPECT_EQ(b, a);
}

}  // namespace
}  // namespace nezha
