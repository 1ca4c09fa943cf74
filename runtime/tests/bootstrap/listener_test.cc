// Listeners that anyone on the network can reach (rendezvous, rail ports) survive stray, idle
// and garbage connections: real kernel sockets on loopback, real handshakes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/socket.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "bootstrap/primary_address.h"
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

// One rank's rendezvous with a one-rail registration (port 1000 + rank).
JobTable join(const Options& o) {
  RankInfo mine;
  mine.rank = o.rank;
  mine.worldSize = o.worldSize;
  mine.fingerprint = configFingerprint(o);
  mine.rails.push_back({"r0", "tcp", "127.0.0.1", 1000 + o.rank});
  return rendezvous(o, mine);
}

TEST(HandshakeAcceptorTest, StrayClientsCostOnlyTheirOwnDeadline) {
  const std::string token = testing::kTestToken;
  Fd listen = listenOn("127.0.0.1", 0, "");
  const int port = localPort(listen.get());
  HandshakeAcceptor::Options ao;
  ao.listener = "test";
  ao.perConnection = 60s;  // far longer than the test: idle clients must not be waited for
  ao.helloDeadline = 60s;
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
  // One closed at once; the impostor (wrong token) closes after the challenge without sending
  // a proof, since the client checks the server's MAC first (bootstrap/auth.h).
  EXPECT_EQ(r.count("closed") ? r.at("closed") : 0, 2u);
  EXPECT_EQ(r.count("garbage") ? r.at("garbage") : 0, 2u);  // HTTP + random bytes
  EXPECT_EQ(r.count("idle") ? r.at("idle") : 0, 2u);
  EXPECT_EQ(r.count("wrong token") ? r.at("wrong token") : 0, 0u);
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
  testing::runRanks(kRanks, [&](int r) { tables[r] = join(opts[r]); });
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

// The attack that once failed start-up 3 times in 4: 1,100 idle sockets held open against the
// rendezvous (more than its 1,024 pending handshakes) before the ranks dial. Every source is
// 127.0.0.1 here, so the per-source cap evicts the oldest idle ones as newcomers arrive, and a
// rank whose connection is still closed retries. The client side needs 1,100 descriptors on
// top of the ranks' own; where RLIMIT_NOFILE cannot be raised that far the test uses what fits
// and says so (the eviction it exercises starts at 64 per source either way).
TEST(RendezvousListenerTest, ThousandIdleSocketsDoNotStopStartUp) {
  int idleCount = 1100;
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  const rlim_t want = static_cast<rlim_t>(idleCount) + 512;
  if (lim.rlim_cur < want) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < want) {
    idleCount = static_cast<int>(lim.rlim_cur) - 512;
    std::printf("RLIMIT_NOFILE is %llu: using %d idle sockets instead of 1100\n",
                static_cast<unsigned long long>(lim.rlim_cur), idleCount);
  }
  ASSERT_GT(idleCount, 128);
  constexpr int kRanks = 8;
  std::vector<Options> opts = testing::jobOptions(kRanks, 1);
  EXPECT_EQ(opts[0].server->bindAddress(), "127.0.0.1");  // "localhost", never the wildcard
  std::vector<Fd> idle;
  for (int i = 0; i < idleCount; ++i) idle.push_back(rawConnect(opts[0].rendezvousPort));
  std::vector<JobTable> tables(kRanks);
  testing::runRanks(kRanks, [&](int r) { tables[r] = join(opts[r]); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(tables[r].ranks.size(), static_cast<size_t>(kRanks));
    EXPECT_EQ(tables[r].session, tables[0].session);
  }
  // The idle ones beyond the per-source cap were evicted, not served.
  EXPECT_GE(opts[0].server->rejectedConnections(), static_cast<uint64_t>(idleCount - 64));
}

// A token holder asking the rendezvous for a rail's purpose is refused before the server proves
// anything for that purpose; the rendezvous itself still forms.
TEST(RendezvousListenerTest, WrongPurposeIsRefused) {
  std::vector<Options> opts = testing::jobOptions(2, 1);
  Fd fd = connectTo("127.0.0.1", opts[0].rendezvousPort, "", "", Clock::now() + 10s, -1, "t");
  EXPECT_THROW(authenticateAsClient(fd.get(), testing::kTestToken, "data rail=0 from=1 to=0",
                                    Clock::now() + 10s, -1, "t"),
               RailError);  // closed before the challenge
  testing::runRanks(2, [&](int r) { join(opts[r]); });
  EXPECT_GE(opts[0].server->rejectedConnections(), 1u);
}

// Where the rendezvous listens: the host's own address when it is local, else the address of
// the default-route interface; never the wildcard.
TEST(RendezvousBindAddressTest, LocalHostOrDefaultRouteInterface) {
  const std::string loDefault =
      "Iface\tDestination\tGateway\tFlags\nlo\t00000000\t00000000\t0003\n";
  EXPECT_EQ(rendezvousBindAddress("localhost", ""), "127.0.0.1");
  EXPECT_EQ(rendezvousBindAddress("127.0.0.7", loDefault), "127.0.0.1")
      << "not an interface address";
  EXPECT_EQ(rendezvousBindAddress("nzr-no-such-host.invalid", loDefault), "127.0.0.1");
  EXPECT_EQ(rendezvousBindAddress("0.0.0.0", loDefault), "127.0.0.1");
  try {
    rendezvousBindAddress("192.0.2.1", "Iface\tDestination\n");
    ADD_FAILURE() << "no local address and no default route was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("NEZHA_RENDEZVOUS host \"192.0.2.1\""), std::string::npos)
        << e.what();
  }
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
