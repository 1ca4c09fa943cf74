// The start-up peer set (transport/peer_set.h): symmetric, within 4 ceil(log2 N) at every N up
// to 1,024, and complete — every one-rail algorithm except alltoall, run for real against a
// channel that records whom it talks to, stays inside it for every rank and every root. If an
// algorithm changes the peers it uses, this test names the algorithm and the pair.
#include "transport/peer_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "failover/control_mesh.h"

namespace nezha {
namespace {

// Records the peer of every op and moves no bytes (the algorithms only compute on garbage).
class RecordingChannel : public Channel {
 public:
  RecordingChannel(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int railIndex() const override { return 0; }
  const std::string& name() const override { return name_; }
  void exchange(std::vector<IoOp>& ops) override {
    for (const IoOp& op : ops) peers.insert(op.peer);
  }
  void abort() override {}
  void setProgressTimeout(std::chrono::milliseconds) override {}
  void setPeersStillComing(std::function<bool()>) override {}
  void setProgressWatch(ProgressWatch) override {}
  std::set<int> peers;

 private:
  int rank_, size_;
  std::string name_ = "r0";
};

// Every algorithm's peers for `rank` of `n` (every root for the rooted ones).
std::set<int> algorithmPeers(int rank, int n, std::string& which, const std::vector<int>& allowed) {
  const size_t count = 4 * static_cast<size_t>(n);  // >= n elements: ring and halving/doubling
  std::vector<char> buf(count * 4 * static_cast<size_t>(n)), out(count * 4);
  Scratch scratch;
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::set<int> all;
  auto run = [&](const std::string& name, const std::function<void(Channel&)>& fn) {
    RecordingChannel ch(rank, n);
    fn(ch);
    for (int p : ch.peers) {
      if (!ok.count(p) && which.empty()) which = name + " to rank " + std::to_string(p);
    }
    all.insert(ch.peers.begin(), ch.peers.end());
  };
  const DataType f32 = DataType::kFloat32;
  const ReduceOp sum = ReduceOp::kSum;
  run("ring allreduce",
      [&](Channel& ch) { allreduceRing(ch, buf.data(), buf.data(), count, f32, sum, scratch); });
  run("recursive doubling",
      [&](Channel& ch) { allreduceRecursiveDoubling(ch, buf.data(), count, f32, sum, scratch); });
  run("halving/doubling",
      [&](Channel& ch) { allreduceHalvingDoubling(ch, buf.data(), count, f32, sum, scratch); });
  run("ring allgather", [&](Channel& ch) { allgatherRing(ch, buf.data(), 16, 16); });
  run("ring reduce-scatter", [&](Channel& ch) {
    reduceScatterRing(ch, buf.data(), count * 4, out.data(), count, f32, sum, scratch);
  });
  run("dissemination barrier", [&](Channel& ch) { barrierDissemination(ch); });
  for (int root = 0; root < n; ++root) {
    run("binomial broadcast from " + std::to_string(root),
        [&](Channel& ch) { broadcastBinomialTree(ch, buf.data(), 64, root); });
    run("chain broadcast from " + std::to_string(root),
        [&](Channel& ch) { broadcastPipelinedChain(ch, buf.data(), 64, root); });
  }
  return all;
}

TEST(PeerSet, EveryAlgorithmButAlltoallStaysInsideTheSet) {
  for (int n = 2; n <= 40; ++n) {
    for (int r = 0; r < n; ++r) {
      const std::vector<int> set = peersUsed(r, n);
      std::string which;
      algorithmPeers(r, n, which, set);
      EXPECT_TRUE(which.empty()) << "rank " << r << " of " << n << ": " << which;
    }
  }
  for (int n : {64, 96, 100, 128}) {
    for (int r : {0, 1, n / 3, n - 2, n - 1}) {
      std::string which;
      algorithmPeers(r, n, which, peersUsed(r, n));
      EXPECT_TRUE(which.empty()) << "rank " << r << " of " << n << ": " << which;
    }
  }
}

TEST(PeerSet, HoldsTheControlMeshNeighbours) {
  for (int n = 2; n <= 130; ++n) {
    for (int r = 0; r < n; ++r) {
      const std::vector<int> set = peersUsed(r, n);
      for (int p : ControlMesh::neighboursOf(r, n)) {
        EXPECT_TRUE(std::binary_search(set.begin(), set.end(), p)) << r << "/" << n << ": " << p;
      }
    }
  }
}

TEST(PeerSet, SymmetricSortedAndWithinFourCeilLog2N) {
  for (int n = 1; n <= 1024; ++n) {
    const int bound = 4 * static_cast<int>(std::ceil(std::log2(n)));
    EXPECT_EQ(peersUsedBound(n), bound) << n;
    std::vector<std::set<int>> sets(n);
    for (int r = 0; r < n; ++r) {
      const std::vector<int> set = peersUsed(r, n);
      ASSERT_TRUE(std::is_sorted(set.begin(), set.end())) << r << "/" << n;
      sets[r].insert(set.begin(), set.end());
      ASSERT_EQ(sets[r].size(), set.size()) << "duplicates for " << r << "/" << n;
      ASSERT_EQ(sets[r].count(r), 0u) << r << "/" << n;
      ASSERT_LE(static_cast<int>(set.size()), bound) << r << "/" << n;
      if (n > 1) {
        ASSERT_GE(set.front(), 0);
        ASSERT_LT(set.back(), n);
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int p : sets[r]) ASSERT_EQ(sets[p].count(r), 1u) << r << " uses " << p << ", not back";
    }
  }
}

TEST(PeerSet, SmallJobsAreAFullMeshLargeOnesAreNot) {
  for (int n = 2; n <= 4; ++n) EXPECT_EQ(peersUsed(0, n).size(), static_cast<size_t>(n - 1));
  EXPECT_EQ(peersUsed(0, 8), (std::vector<int>{1, 2, 4, 6, 7}));
  EXPECT_LE(peersUsed(5, 1024).size(), 40u);
}

}  // namespace
}  // namespace nezha
