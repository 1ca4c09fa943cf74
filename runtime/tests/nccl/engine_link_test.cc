// The plugin's connection as a two-rank job of the failover engine (nccl/engine_link.h): a
// sender and a receiver over two loopback TCP rails, posting and polling as NCCL's proxy thread
// does. Messages of every size arrive exact, posts and polls never wait for the peer, a message
// larger than the posted receive fails both ends, a cut rail fails over and comes back, and a
// drain/restore takes a rail out of the split and gives it back.
#include "nccl/engine_link.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "nccl/comm_error.h"
#include "test_util.h"
#include "transport/blackhole_relay.h"
#include "transport/tcp/tcp_channel.h"
#include "transport/transport.h"

namespace nezha::ncclnet {
namespace {

using nezha::testing::kTestToken;
using nezha::testing::loopbackRails;
using nezha::testing::runRanks;

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;

Options linkOptions(int rank) {
  Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.rails = loopbackRails(2);
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  // Equal shares, held: the rails' expected speeds seed the split (no bandwidth probe, whose
  // loopback measurements vary with the machine's load) and the tuner never moves it, so which
  // rails carry a message depends only on the failures and drains a test makes.
  for (RailSpec& r : o.rails) r.expectedMbps = 10000;
  o.probeBytes = 0;
  o.tuneInterval = 1 << 30;
  o.coldThreshold = 64 << 10;
  o.readmitHoldDown = std::chrono::milliseconds(50);
  return o;
}

// Both ends of one connection, built concurrently (each end's start-up probe needs the other).
std::array<std::unique_ptr<EngineLink>, 2> connectLinks(
    const std::string& session, const std::function<void(Options&)>& tweak = nullptr) {
  std::array<std::vector<std::unique_ptr<Transport>>, 2> transports;
  JobTable job;
  job.session = session;
  for (int rank : {kR, kS}) {  // job.ranks is indexed by rank: the receiver is rank 0
    const Options o = linkOptions(rank);
    job.ranks.push_back(RankInfo{});
    job.ranks.back().rank = rank;
    job.ranks.back().worldSize = 2;
    for (size_t rail = 0; rail < o.rails.size(); ++rail) {
      const int index = static_cast<int>(rail);
      transports[rank].push_back(makeTransport(o, index, o.rails[rail].address));
      job.ranks.back().rails.push_back(transports[rank].back()->endpoint());
    }
  }
  std::array<std::unique_ptr<EngineLink>, 2> links;
  runRanks(2, [&](int rank) {
    for (auto& t : transports[rank]) t->connect(job, Clock::now() + std::chrono::seconds(20));
    Options o = linkOptions(rank);
    if (tweak) tweak(o);
    links[rank] = std::make_unique<EngineLink>(o, std::move(transports[rank]), job);
  });
  return links;
}

// Both ends of one connection over connections opened by hand, as the plugin's rail acceptor
// hands them over: per rail, o.streamsPerPeer data connections and a control connection, each
// dialled by the sender and accepted by the receiver. No job table names a port (the channels
// never listen); a rebuilt rail gets ordinary channels with ports agreed over the control mesh.
// With `relay`, rail `relayRail`'s data connections pass through it (a black hole on demand);
// `tweak` changes both ends' options.
std::array<std::unique_ptr<EngineLink>, 2> adoptLinks(
    const std::string& session, testing::BlackHoleRelay* relay = nullptr, size_t relayRail = 0,
    const std::function<void(Options&)>& tweak = nullptr) {
  auto options = [&tweak](int rank) {
    Options o = linkOptions(rank);
    if (tweak) tweak(o);
    return o;
  };
  const Options o = options(kS);
  std::array<std::vector<std::unique_ptr<Transport>>, 2> transports;
  JobTable job;
  job.session = session;
  for (int rank : {kR, kS}) {  // job.ranks is indexed by rank: the receiver is rank 0
    job.ranks.push_back(RankInfo{});
    job.ranks.back().rank = rank;
    job.ranks.back().worldSize = 2;
  }
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  for (size_t rail = 0; rail < o.rails.size(); ++rail) {
    const std::string& ip = o.rails[rail].address;
    Fd listener = listenOn(ip, 0, "");
    const int port = localPort(listener.get());
    const int index = static_cast<int>(rail);
    std::array<std::vector<Fd>, 2> conns;
    for (int c = 0; c <= o.streamsPerPeer; ++c) {
      const bool relayed = relay != nullptr && rail == relayRail && c < o.streamsPerPeer;
      conns[kS].push_back(relayed ? relay->connectThrough(ip, port, deadline)
                                  : connectTo(ip, port, ip, "", deadline, index, "adopted"));
      conns[kR].push_back(acceptUntil(listener.get(), deadline, index, "adopted"));
    }
    for (int rank : {kS, kR}) {
      job.ranks[rank].rails.push_back(RailEndpoint{o.rails[rail].name, "tcp", ip, 0});
      Fd control = std::move(conns[rank].back());
      conns[rank].pop_back();
      transports[rank].push_back(std::make_unique<TcpChannel>(
          options(rank), index, ip, std::move(conns[rank]), std::move(control)));
    }
  }
  std::array<std::unique_ptr<EngineLink>, 2> links;
  runRanks(2, [&](int rank) {
    links[rank] = std::make_unique<EngineLink>(options(rank), std::move(transports[rank]), job);
  });
  return links;
}

uint8_t pattern(int message, size_t i) { return static_cast<uint8_t>(message * 131 + i * 7 + 1); }

struct Done {
  uint64_t bytes = 0;
  int rails = 0;
};

// Polls like NCCL's proxy thread until the message is done.
Done waitDone(EngineLink& link, uint64_t id) {
  Done d;
  while (!link.test(id, &d.bytes, &d.rails)) std::this_thread::yield();
  return d;
}

// One message from sender to receiver; true when the receiver got exactly what was sent.
bool sendOne(std::array<std::unique_ptr<EngineLink>, 2>& links, int m, size_t bytes,
             std::array<Done, 2>& done) {
  std::vector<uint8_t> out(bytes), in(bytes + 100, 0);
  for (size_t i = 0; i < bytes; ++i) out[i] = pattern(m, i);
  const uint64_t sid = links[kS]->post(out.data(), bytes);
  const uint64_t rid = links[kR]->post(in.data(), in.size());
  done[kS] = waitDone(*links[kS], sid);
  done[kR] = waitDone(*links[kR], rid);
  return std::equal(out.begin(), out.end(), in.begin());
}

TEST(EngineLinkTest, CarriesMessagesOfEverySizeExactly) {
  auto links = connectLinks("link-sizes");
  const std::vector<size_t> sizes{0, 1, 4097, (64 << 10) + 3, 1 << 20, (3 << 20) + 5};
  for (size_t m = 0; m < sizes.size(); ++m) {
    std::array<Done, 2> done;
    EXPECT_TRUE(sendOne(links, static_cast<int>(m), sizes[m], done)) << sizes[m] << " bytes";
    EXPECT_EQ(done[kS].bytes, sizes[m]);
    EXPECT_EQ(done[kR].bytes, sizes[m]) << "the receiver learns the size as sent";
  }
  // The largest message was split over both rails, the same way on both ends.
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, 9, 3 << 20, done));
  EXPECT_EQ(done[kS].rails, 2);
  EXPECT_EQ(done[kR].rails, 2);
}

TEST(EngineLinkTest, PostAndTestNeverWaitForThePeer) {
  auto links = connectLinks("link-nonblocking");
  // Three sends with no receive posted: each post returns, and none can be done yet (the
  // sender learns the receiver's capacity before moving a byte).
  std::vector<std::vector<uint8_t>> out(3, std::vector<uint8_t>(1 << 20));
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(1 << 20, 0));
  std::vector<uint64_t> sids, rids;
  for (int m = 0; m < 3; ++m) {
    for (size_t i = 0; i < out[m].size(); ++i) out[m][i] = pattern(m, i);
    sids.push_back(links[kS]->post(out[m].data(), out[m].size()));
  }
  uint64_t bytes = 0;
  EXPECT_FALSE(links[kS]->test(sids[0], &bytes));
  for (int m = 0; m < 3; ++m) rids.push_back(links[kR]->post(in[m].data(), in[m].size()));
  for (int m = 0; m < 3; ++m) {
    waitDone(*links[kS], sids[m]);
    EXPECT_EQ(waitDone(*links[kR], rids[m]).bytes, out[m].size());
    EXPECT_EQ(in[m], out[m]) << "message " << m;
  }
}

TEST(EngineLinkTest, AMessageLargerThanTheReceiveFailsBothEnds) {
  auto links = connectLinks("link-too-large");
  std::vector<uint8_t> out(1000, 7), in(10, 0);
  const uint64_t sid = links[kS]->post(out.data(), out.size());
  const uint64_t rid = links[kR]->post(in.data(), in.size());
  for (auto [link, id] : {std::pair{links[kS].get(), sid}, std::pair{links[kR].get(), rid}}) {
    try {
      waitDone(*link, id);
      ADD_FAILURE() << "a 1000-byte send into a 10-byte receive completed";
    } catch (const CommError& e) {
      EXPECT_EQ(e.code, ncclInvalidUsage);
      EXPECT_NE(std::string(e.what()).find("1000 bytes exceed the 10 bytes"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(in, std::vector<uint8_t>(10, 0)) << "nothing was written past the check";
  // Both ends stopped at that message: a later one fails at once with the same cause.
  const uint64_t later = links[kS]->post(out.data(), 1);
  EXPECT_THROW(waitDone(*links[kS], later), CommError);
}

TEST(EngineLinkTest, ClosingWithAMessageInFlightDoesNotWaitForThePeer) {
  // An I/O timeout far beyond the test's own: closing must not wait for it.
  auto links = connectLinks("link-close", [](Options& o) { o.ioTimeout = std::chrono::hours(1); });
  std::vector<uint8_t> out(1 << 20, 3);
  links[kS]->post(out.data(), out.size());  // the receiver never posts its half
  links[kS].reset();
  std::vector<uint8_t> in(1 << 20, 0);
  EXPECT_THROW(waitDone(*links[kR], links[kR]->post(in.data(), in.size())), CommError)
      << "the receiver's link learns that its peer is gone";
}

TEST(EngineLinkTest, ACutRailFailsOverAndComesBackWithEveryMessageExact) {
  auto links = connectLinks("link-cut");
  constexpr int kCutAt = 4;
  int afterReadmission = -1;
  for (int m = 0; afterReadmission < 2; ++m) {
    ASSERT_LT(m, 5000) << "rail r1 never came back";
    if (m == kCutAt) links[kS]->abortRail(1);  // an operator's cut, between messages
    std::array<Done, 2> done;
    ASSERT_TRUE(sendOne(links, m, 2 << 20, done)) << "message " << m;
    if (m == kCutAt + 1) {
      EXPECT_EQ(done[kS].rails, 1);
      EXPECT_EQ(done[kR].rails, 1);
    }
    if (afterReadmission >= 0 || !links[kS]->metrics().readmissions.empty()) ++afterReadmission;
  }
  for (int rank : {kS, kR}) {
    const Metrics& metrics = links[rank]->metrics();
    ASSERT_EQ(metrics.failovers.size(), 1u) << "rank " << rank;
    EXPECT_EQ(metrics.failovers[0].rail, "r1");
    ASSERT_EQ(metrics.readmissions.size(), 1u) << "rank " << rank;
    EXPECT_EQ(metrics.readmissions[0].rail, "r1");
  }
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, 99, 2 << 20, done));
  EXPECT_EQ(done[kS].rails, 2) << "r1 carries its share again";
}

// The plugin's link watch (nccl/plugin_context.h) tells every connection when a rail's link loses
// carrier: the rail leaves at once with reason "carrier" on both ends (the peer learns it over
// the control mesh), stays out however long its hold-down has run while the link is down, and
// comes back once the link is up again. Every message exact throughout.
TEST(EngineLinkTest, ALostCarrierTakesTheRailOutUntilTheLinkIsBack) {
  auto links = connectLinks("link-carrier");
  constexpr int kDownAt = 2;
  int m = 0;
  for (; m < kDownAt; ++m) {
    std::array<Done, 2> done;
    ASSERT_TRUE(sendOne(links, m, 2 << 20, done)) << "message " << m;
  }
  links[kS]->onLinkDown(1);
  // Ten hold-downs (50 ms each) of messages with the link down: a rail whose link is down is
  // never rebuilt, however long it has been out.
  const auto downSince = Clock::now();
  for (; Clock::now() - downSince < std::chrono::milliseconds(500) || m < kDownAt + 5; ++m) {
    std::array<Done, 2> done;
    ASSERT_TRUE(sendOne(links, m, 2 << 20, done)) << "message " << m;
    EXPECT_EQ(done[kS].rails, 1) << "message " << m << " while r1's link is down";
  }
  for (int rank : {kS, kR}) {
    const Metrics& metrics = links[rank]->metrics();
    ASSERT_EQ(metrics.failovers.size(), 1u) << "rank " << rank;
    EXPECT_EQ(metrics.failovers[0].rail, "r1");
    EXPECT_EQ(metrics.failovers[0].reason, "carrier") << "rank " << rank;
    EXPECT_TRUE(metrics.readmissions.empty()) << "rank " << rank << ": rebuilt with its link down";
  }
  links[kS]->onLinkUp(1);
  for (const int upAt = m; links[kS]->metrics().readmissions.empty(); ++m) {
    ASSERT_LT(m - upAt, 5000) << "r1 never came back after its link did";
    std::array<Done, 2> done;
    ASSERT_TRUE(sendOne(links, m, 2 << 20, done)) << "message " << m;
  }
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, m, 2 << 20, done));
  EXPECT_EQ(done[kS].rails, 2) << "r1 carries its share again";
}

// A message up to NEZHA_ROUND_FREE_BYTES is one engine operation: its size rides in the
// operation header with the data, and the operation skips its round (every 16th holds one).
// A cut of the rail they ride fails over; the messages stay exact.
TEST(EngineLinkTest, SmallMessagesAreOneRoundFreeOperationAndSurviveACutOfTheirRail) {
  auto links = connectLinks("link-small");
  constexpr int kCutAt = 10;
  int cut = -1;
  for (int m = 0; m < 40; ++m) {
    if (m == kCutAt) {
      // The cold rail carried every message so far: cut that one.
      const std::vector<uint64_t> bytes = links[kS]->counters().railBytes;
      cut = bytes[0] > 0 ? 0 : 1;
      ASSERT_EQ(bytes[1 - cut], 0u) << "small messages ride one rail";
      for (int rank : {kS, kR}) {
        EXPECT_EQ(links[rank]->metrics().roundFreeOps, uint64_t{kCutAt - 1})
            << "rank " << rank << ": every operation but op 0 (a confirming round) skipped it";
      }
      links[kS]->abortRail(cut);
    }
    std::array<Done, 2> done;
    const size_t size = m % 2 ? 4096 : (64 << 10);
    ASSERT_TRUE(sendOne(links, m, size, done)) << "message " << m;
    EXPECT_EQ(done[kR].bytes, size);
    EXPECT_EQ(done[kS].rails, 1);
  }
  for (int rank : {kS, kR}) {
    const Metrics& metrics = links[rank]->metrics();
    ASSERT_EQ(metrics.failovers.size(), 1u) << "rank " << rank;
    EXPECT_EQ(metrics.failovers[0].rail, cut == 0 ? "r0" : "r1");
  }
}

TEST(EngineLinkTest, RunsOnConnectionsOpenedElsewhereAndRebuildsACutRail) {
  auto links = adoptLinks("link-adopted");
  int afterReadmission = -1;
  for (int m = 0; afterReadmission < 1; ++m) {
    ASSERT_LT(m, 5000) << "rail r1 never came back";
    if (m == 2) links[kR]->abortRail(1);
    std::array<Done, 2> done;
    ASSERT_TRUE(sendOne(links, m, 2 << 20, done)) << "message " << m;
    if (m < 2) {
      EXPECT_EQ(done[kS].rails, 2) << "message " << m;
    }
    if (afterReadmission >= 0 || !links[kR]->metrics().readmissions.empty()) ++afterReadmission;
  }
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, 99, 2 << 20, done));
  EXPECT_EQ(done[kR].rails, 2) << "the rebuilt r1 carries its share";
}

// The plugin runs one engine per connection; one that finds a rail silent tells the others of
// its process (PluginContext::onRailSilent), which then fail that rail after a short quiet
// instead of each at its own progress deadline: here 20 s, the watchdog off, so only the
// suspicion can end the wait on the black-holed rail. The peer's engine, which saw nothing
// itself, reports the finding to its own process in turn (its receiver there would see it).
TEST(EngineLinkTest, ASuspectedRailFailsAfterAShortQuietNotItsDeadline) {
  testing::BlackHoleRelay relay;  // outlives the links
  auto links = adoptLinks("link-suspect", &relay, 1, [](Options& o) {
    o.progressFloor = std::chrono::milliseconds(20000);
    o.watchdog = std::chrono::milliseconds(0);
  });
  std::array<std::vector<int>, 2> told;  // rails each end's silence listener was called with
  for (int rank : {kS, kR}) {
    links[rank]->setSilenceListener([&told, rank](int rail) { told[rank].push_back(rail); });
  }
  // Small enough that the sender's part on r1 fits in its socket buffers whatever their size
  // (64 KiB per stream): its slice ends, and it learns of the silence only from its peer.
  const size_t bytes = 256 << 10;
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, 0, bytes, done));
  ASSERT_EQ(done[kR].rails, 2);
  relay.blackHole();
  links[kR]->suspectRail(1);  // what another connection of the receiver's process found
  ASSERT_TRUE(sendOne(links, 1, bytes, done)) << "replayed on r0, exact";
  const Metrics& m = links[kR]->metrics();
  ASSERT_EQ(m.failovers.size(), 1u);
  EXPECT_EQ(m.failovers[0].rail, "r1");
  EXPECT_NE(m.failovers[0].localError.find("another connection of this process found the rail "
                                           "silent"),
            std::string::npos)
      << m.failovers[0].localError;
  // The receiver acted on a suspicion and tells nobody again; the sender learnt of the silence
  // from its peer and tells its process.
  EXPECT_TRUE(told[kR].empty());
  EXPECT_EQ(told[kS], std::vector<int>{1});
}

// Two messages after a drain or restore request: the first one's round applies it on both
// ends, the second runs on the rails it leaves.
void expectAfterRequest(std::array<std::unique_ptr<EngineLink>, 2>& links, int firstMessage,
                        int railsCarrying, const std::string& r1State) {
  std::array<Done, 2> done;
  ASSERT_TRUE(sendOne(links, firstMessage, 2 << 20, done));
  ASSERT_TRUE(sendOne(links, firstMessage + 1, 2 << 20, done));
  for (int rank : {kS, kR}) {
    EXPECT_EQ(done[rank].rails, railsCarrying) << "rank " << rank;
    EXPECT_EQ(links[rank]->railState(1), r1State) << "rank " << rank;
  }
}

TEST(EngineLinkTest, DrainTakesARailOutAndRestoreGivesItBack) {
  auto links = connectLinks("link-drain");
  // Asked on the receiver's host only: the round carries it to the sender.
  links[kR]->request(1, FailoverEngine::Request::kDrain);
  expectAfterRequest(links, 0, 1, "drained");
  links[kS]->request(1, FailoverEngine::Request::kRestore);
  expectAfterRequest(links, 2, 2, "healthy");
  for (int rank : {kS, kR}) {
    EXPECT_EQ(links[rank]->metrics().drains.size(), 1u);
    EXPECT_EQ(links[rank]->metrics().restores.size(), 1u);
  }
}

}  // namespace
}  // namespace nezha::ncclnet
