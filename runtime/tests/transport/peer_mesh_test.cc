// A rail's listener under a flood from one host (transport/peer_mesh.h): idle connections from
// one source address hold at most PeerMesh::kMaxPendingPerSource pending handshakes, the rest
// are evicted oldest first, and the genuine peer, arriving from another address after the
// flood, connects and authenticates as if the flood were not there.
#include "transport/peer_mesh.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <vector>

#include "base/socket.h"
#include "test_util.h"
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

}  // namespace
}  // namespace nezha
