// Connections that grow with log N (transport/peer_set.h, runtime/README.md "Connection
// model"), through the whole communicator: a job of 9 in-process ranks on one rail opens only
// the start-up set's data and control connections (counted in the kernel's socket table, both
// ends, on an address no other test uses), runs its collectives on them alone, and an alltoall
// then connects every other pair on first use and delivers every element exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"
#include "transport/peer_set.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::makeJob;
using testing::runRanks;

// This test's rail address: nothing else binds it, so every socket on it is this job's.
constexpr char kRailAddress[] = "127.0.36.9";
constexpr char kRailAddressHex[] = "0924007F";  // as /proc/net/tcp prints it

// Established TCP sockets whose local address is the rail's (each connection counts twice: both
// of its ends are in this process and on this address).
size_t establishedOnRail() {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  size_t n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "01" && local.rfind(kRailAddressHex, 0) == 0) ++n;
  }
  return n;
}

int32_t value(int from, int to, size_t i) {
  return static_cast<int32_t>(from * 10000000 + to * 100000 + static_cast<int>(i % 99991));
}

TEST(LogNConnections, OnlyTheSetUntilAnAlltoallConnectsTheRestExactly) {
  const int n = 9;
  const int streams = 2;
  const size_t before = establishedOnRail();
  auto comms = makeJob(jobOptions(n, 1, [&](Options& o) {
    o.rails = {RailSpec{"r0", "lo", "tcp", kRailAddress}};
    o.streamsPerPeer = streams;
  }));
  size_t setSizes = 0;
  for (int r = 0; r < n; ++r) setSizes += peersUsed(r, n).size();
  ASSERT_LT(setSizes, static_cast<size_t>(n * (n - 1)));  // 9 ranks: the set is not all pairs
  // Per pair of the set: the data streams and one control connection, both ends.
  EXPECT_EQ(establishedOnRail() - before, setSizes * (streams + 1));
  // Collectives other than alltoall stay on those connections.
  runRanks(n, [&](int r) {
    std::vector<float> v(1000, static_cast<float>(r + 1));
    comms[r]->allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(v[999], static_cast<float>(n * (n + 1) / 2));
    std::vector<int32_t> b(5000, r == 4 ? 7 : -1);
    comms[r]->broadcast(b.data(), b.size(), DataType::kInt32, 4);
    EXPECT_EQ(b[4999], 7);
  });
  EXPECT_EQ(establishedOnRail() - before, setSizes * (streams + 1));
  // An alltoall connects every other pair (data streams only) and is exact.
  const size_t count = 3001;
  runRanks(n, [&](int r) {
    std::vector<int32_t> send(n * count), recv(n * count, -1);
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < count; ++i) send[q * count + i] = value(r, q, i);
    }
    comms[r]->alltoall(send.data(), recv.data(), count, DataType::kInt32);
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[q * count + i], value(q, r, i)) << r << " from " << q << " at " << i;
      }
    }
  });
  EXPECT_EQ(establishedOnRail() - before, static_cast<size_t>(n * (n - 1) * streams) + setSizes);
}

}  // namespace
}  // namespace nezha
