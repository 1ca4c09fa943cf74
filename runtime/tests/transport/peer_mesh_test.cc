// A rail's connections (transport/peer_mesh.h, tcp/tcp_channel.h):
//  - under a flood from one host: idle connections from one source address hold at most
//    PeerMesh::kMaxPendingPerSource pending handshakes, the rest are evicted oldest first, and
//    the genuine peer, arriving from another address after the flood, connects as if the flood
//    were not there;
//  - on first use: a channel of 8 ranks connects only its start-up set (transport/peer_set.h),
//    a pair outside it connects when an exchange first names it, from both ends at once, and
//    moves its bytes exactly; a peer that dials before this rank needs the connection is kept
//    until it does; strangers on the listener meanwhile are turned away.
#include "transport/peer_mesh.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <future>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/socket.h"
#include "bootstrap/auth.h"
#include "test_util.h"
#include "transport/peer_set.h"
#include "transport/tcp/tcp_channel.h"
#include "transport/transport.h"

namespace nezha {
namespace {

using nezha::testing::kTestToken;
using nezha::testing::runRanks;

Options rankOptions(int rank) {
  Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  // Rank 0 listens on 127.0.0.1, rank 1 dials from 127.0.0.2; the flood comes from 127.0.0.3.
  o.rails = {RailSpec{"r0", "lo", "tcp", rank == 0 ? "127.0.0.1" : "127.0.0.2"}};
  return o;
}

TEST(PeerMesh, AFloodFromOneSourceCannotPushOutAGenuinePeer) {
  std::array<std::unique_ptr<Transport>, 2> transports;
  JobTable job;
  job.session = "flood";
  for (int rank : {0, 1}) {
    const Options o = rankOptions(rank);
    transports[rank] = makeTransport(o, 0, o.rails[0].address);
    job.ranks.push_back(RankInfo{rank, 2, "", {transports[rank]->endpoint()}});
  }
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  const size_t flood = PeerMesh::kMaxPendingPerSource + 40;
  std::vector<Fd> idle;
  for (size_t i = 0; i < flood; ++i) {
    idle.push_back(
        connectTo("127.0.0.1", job.ranks[0].rails[0].port, "127.0.0.3", "", deadline, 0, "flood"));
  }
  runRanks(2, [&](int rank) { transports[rank]->connect(job, deadline); });
  // The source's oldest idle connections made room for its newer ones; none of the genuine
  // peer's was touched (it connected).
  EXPECT_GE(transports[0]->rejectedConnections(), flood - PeerMesh::kMaxPendingPerSource);
  EXPECT_EQ(transports[1]->rejectedConnections(), 0u);
}

Options meshOptions(int rank, int worldSize) {
  Options o;
  o.rank = rank;
  o.worldSize = worldSize;
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  o.streamsPerPeer = 2;
  o.rails = {RailSpec{"r0", "lo", "tcp", "127.0.0.1"}};
  return o;
}

// `n` TCP rails of one job, each listening, and the job table that names them.
struct Rails {
  explicit Rails(int n, std::chrono::milliseconds ioTimeout = std::chrono::seconds(20)) {
    job.session = "first-use";
    for (int r = 0; r < n; ++r) {
      Options o = meshOptions(r, n);
      o.ioTimeout = ioTimeout;
      channels.push_back(std::make_unique<TcpChannel>(o, 0, o.rails[0].address));
      job.ranks.push_back(RankInfo{r, n, "", {channels.back()->endpoint()}});
    }
  }
  JobTable job;
  std::vector<std::unique_ptr<TcpChannel>> channels;
};

// Sends `from`'s pattern to every peer in `peers` and checks theirs, in one exchange.
void swapWith(TcpChannel& ch, const std::vector<int>& peers) {
  const size_t bytes = 100003;
  std::vector<std::vector<char>> out(peers.size()), in(peers.size());
  std::vector<IoOp> ops;
  for (size_t i = 0; i < peers.size(); ++i) {
    out[i].resize(bytes);
    in[i].assign(bytes, 0);
    for (size_t b = 0; b < bytes; ++b) out[i][b] = static_cast<char>(ch.rank() * 31 + peers[i] + b);
    ops.push_back(IoOp::send(peers[i], out[i].data(), bytes));
    ops.push_back(IoOp::recv(peers[i], in[i].data(), bytes));
  }
  ch.exchange(ops);
  for (size_t i = 0; i < peers.size(); ++i) {
    for (size_t b = 0; b < bytes; ++b) {
      ASSERT_EQ(in[i][b], static_cast<char>(peers[i] * 31 + ch.rank() + b))
          << ch.rank() << " from " << peers[i] << " byte " << b;
    }
  }
}

TEST(FirstUse, StartUpConnectsTheSetAndAPairOutsideItConnectsFromBothEndsAtOnce) {
  const int n = 8;
  Rails rails(n);
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  runRanks(n, [&](int r) { rails.channels[r]->connect(rails.job, deadline); });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(rails.channels[r]->connectedPeers(), peersUsed(r, n)) << r;
    // Control connections exist for the set's peers only.
    const std::vector<Fd> control = rails.channels[r]->releaseControl();
    for (int p = 0; p < n; ++p) {
      const std::vector<int> set = peersUsed(r, n);
      EXPECT_EQ(control[p].valid(), std::count(set.begin(), set.end(), p) == 1) << r << "->" << p;
    }
  }
  // 0 and 3 are outside each other's set; both name the other in the same exchange at once.
  const std::vector<int> setOfZero = peersUsed(0, n);
  ASSERT_EQ(std::count(setOfZero.begin(), setOfZero.end(), 3), 0);
  runRanks(2, [&](int i) { swapWith(*rails.channels[i == 0 ? 0 : 3], {i == 0 ? 3 : 0}); });
  EXPECT_EQ(rails.channels[0]->connectedPeers(), (std::vector<int>{1, 2, 3, 4, 6, 7}));
  // Then every rank with every other (what an alltoall asks): a full mesh, every byte right.
  runRanks(n, [&](int r) {
    std::vector<int> others;
    for (int p = 0; p < n; ++p) {
      if (p != r) others.push_back(p);
    }
    swapWith(*rails.channels[r], others);
    EXPECT_EQ(rails.channels[r]->connectedPeers(), others) << r;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(rails.channels[r]->rejectedConnections(), 0u) << r;
}

// Rank 3 dials rank 0 on first use, and rank 0 never gets to accept it: abort() (the failover
// engine's, from another thread) ends the exchange with a RailError at once, not after the I/O
// timeout (ten minutes here: the test would hang).
TEST(FirstUse, AbortEndsAFirstUseDialThatNoOneAccepts) {
  const int n = 8;
  Rails rails(n, std::chrono::minutes(10));
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  runRanks(n, [&](int r) { rails.channels[r]->connect(rails.job, deadline); });
  std::promise<void> dialling;
  auto exchange = std::async(std::launch::async, [&] {
    char byte = 1;
    std::vector<IoOp> ops{IoOp::send(0, &byte, 1)};
    dialling.set_value();
    rails.channels[3]->exchange(ops);
  });
  dialling.get_future().wait();
  rails.channels[3]->abort();
  EXPECT_THROW(exchange.get(), RailError);
}

// The purpose TcpChannel names a data stream with (what a genuine dialer proves).
std::string dataPurpose(int from, int to, int stream) {
  return strCat("test from=", from, " to=", to, " stream=", stream);
}

// Blocks until the peer closes `fd` (the listener turned it away).
void awaitClose(const Fd& fd) {
  char byte;
  while (::recv(fd.get(), &byte, 1, 0) > 0) {
  }
}

TEST(FirstUse, AnEarlyDialIsKeptUntilAskedAndStrangersAreTurnedAway) {
  const int n = 3;
  std::vector<Fd> listeners;
  JobTable job;
  job.session = "kept";
  for (int r = 0; r < n; ++r) {
    listeners.push_back(listenOn("127.0.0.1", 0, "lo"));
    job.ranks.push_back(RankInfo{
        r, n, "", {RailEndpoint{"r0", "tcp", "127.0.0.1", localPort(listeners[r].get())}}});
  }
  std::vector<std::unique_ptr<PeerMesh>> meshes;
  for (int r = 0; r < n; ++r) {
    meshes.push_back(std::make_unique<PeerMesh>(meshOptions(r, n), 0, "127.0.0.1"));
    meshes[r]->open(job, listeners[r].get(), SocketTuning{}, 2, dataPurpose);
  }
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  // Rank 0 waits for rank 2 only. Meanwhile rank 1 dials it (before rank 0 needs rank 1), a
  // stranger sends garbage and a token holder proves a purpose of no peer of this rail; rank 2
  // dials only after all three were dealt with, so rank 0 serves them inside this wait.
  auto waiting =
      std::async(std::launch::async, [&] { return meshes[0]->connect({2}, 2, deadline); });
  meshes[1]->connect({0}, 2, deadline);  // returns once rank 0 authenticated both streams
  const int port = job.ranks[0].rails[0].port;
  Fd garbage = connectTo("127.0.0.1", port, "", "", deadline, 0, "stranger");
  ASSERT_EQ(::send(garbage.get(), "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL), 18);
  awaitClose(garbage);
  Fd wrongPurpose = connectTo("127.0.0.1", port, "", "", deadline, 0, "token holder");
  authenticateAsClient(wrongPurpose.get(), kTestToken, "data session=old from=2 to=0 stream=0",
                       deadline, 0, "rank 0");
  awaitClose(wrongPurpose);
  meshes[2]->connect({0}, 2, deadline);
  std::vector<std::vector<Fd>> toTwo = waiting.get();
  EXPECT_TRUE(toTwo[2][0].valid() && toTwo[2][1].valid());
  EXPECT_EQ(meshes[0]->kept(), 2u);  // rank 1's two streams, authenticated early
  EXPECT_EQ(meshes[0]->rejected(), 2u);
  // Asked for now: handed over at once, without a dial.
  std::vector<std::vector<Fd>> toOne = meshes[0]->connect({1}, 2, Clock::now());
  EXPECT_TRUE(toOne[1][0].valid() && toOne[1][1].valid());
  EXPECT_EQ(meshes[0]->kept(), 0u);
}

}  // namespace
}  // namespace nezha
