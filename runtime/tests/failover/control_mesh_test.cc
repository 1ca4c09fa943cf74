// The control mesh between ranks in one process, rails as socket pairs: agreement survives
// losing a rail (even mid-stream), garbage on a connection drops that connection and nothing
// else, a silent or vanished peer gives a bounded, clear error, rail-down notices and "which
// operation are you in" answers arrive. With more ranks: the dissemination round is exact at
// 2, 3, 5 and 8 ranks in ceil(log2 N) messages per rank per round, and a rank that never joins
// or vanishes fails the round on every other rank. Heartbeats go to the O(log N) neighbours
// only; a gone rank reaches the others by a flooded verdict, a healed or slow one is not silent,
// and one still starting is not silent before it was first heard. A rank killed inside a round
// is what every survivor's next round names, not a rank that failed and left after it.
#include "failover/control_mesh.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "failover/mesh_frame.h"
#include "nezha/nezha.hpp"
#include "transport/peer_set.h"

namespace nezha {
namespace {

using std::chrono::milliseconds;

// Two meshes (rank 0 and rank 1) joined by one socket pair per rail.
struct Pair {
  std::vector<int> raw0, raw1;  // per rail: rank 0's and rank 1's end (owned by the meshes)
  std::atomic<int> downPeer{-1}, downRail{-1};
  std::atomic<uint64_t> downGen{0};
  std::unique_ptr<ControlMesh> m0, m1;

  Fd blackHole;  // with silentRail0: rank 1's end of rail 0, held but never read

  explicit Pair(int rails, milliseconds silence = milliseconds(300), bool silentRail0 = false,
                milliseconds peerSilence = milliseconds(0)) {
    auto onDown = [this](int peer, int rail, uint64_t gen) {
      downGen = gen;
      downRail = rail;
      downPeer = peer;
    };
    m0 = std::make_unique<ControlMesh>(0, 2, rails, silence, onDown, peerSilence);
    m1 = std::make_unique<ControlMesh>(1, 2, rails, silence, onDown, peerSilence);
    for (int r = 0; r < rails; ++r) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      raw0.push_back(sv[0]);
      raw1.push_back(sv[1]);
      std::vector<Fd> c0(2), c1(2);
      c0[1] = Fd(sv[0]);  // rank 0's connection to peer 1
      if (silentRail0 && r == 0) {
        blackHole = Fd(sv[1]);  // what rank 0 sends on rail 0 is never seen (a silent cut)
      } else {
        c1[0] = Fd(sv[1]);  // rank 1's connection to peer 0
      }
      m0->attach(r, std::move(c0));
      m1->attach(r, std::move(c1));
    }
  }

  // Both ranks max-reduce at once; returns rank 0's result (rank 1's must match).
  std::vector<double> agree(std::vector<double> a, std::vector<double> b,
                            milliseconds timeout = milliseconds(5000)) {
    auto f = std::async(std::launch::async, [&] {
      m1->maxReduce(b, timeout);
      return b;
    });
    m0->maxReduce(a, timeout);
    EXPECT_EQ(f.get(), a);
    return a;
  }
};

TEST(ControlMeshTest, MaxReduceAcrossRanks) {
  Pair p(2);
  EXPECT_EQ(p.agree({1, 0, 5}, {0, 2, 3}), (std::vector<double>{1, 2, 5}));
  EXPECT_EQ(p.agree({-1}, {-2}), (std::vector<double>{-1}));
  EXPECT_EQ(p.m0->openPeers(), (std::vector<int>{1, 1}));
}

TEST(ControlMeshTest, RoundsCompleteWhenOneRailDiesEvenBetweenRounds) {
  Pair p(2);
  EXPECT_EQ(p.agree({1}, {2}), (std::vector<double>{2}));
  ::shutdown(p.raw0[0], SHUT_RDWR);  // rail 0 gone in both directions
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(p.agree({static_cast<double>(i)}, {0}), (std::vector<double>{double(i)}));
  }
  // The dead rail's connection is noticed and counted as closed.
  for (int i = 0; i < 100 && p.m0->openPeers()[0] != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(p.m0->openPeers(), (std::vector<int>{0, 1}));
}

// Rounds go out on one rail per peer: rank 0's copy vanishes on rail 0, and rank 0 finishes
// the round at once (rank 1's copy came on rail 1) and moves on. Rank 1 must still get rank 0's
// values by asking again on every rail.
TEST(ControlMeshTest, RoundCompletesWhenTheFirstCopyIsLostSilently) {
  Pair p(2, milliseconds(300), /*silentRail0=*/true);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(p.agree({static_cast<double>(i)}, {-1}), (std::vector<double>{double(i)}));
  }
}

TEST(ControlMeshTest, GarbageOnOneConnectionDropsOnlyThatConnection) {
  Pair p(2);
  const std::string junk(64, 'x');
  ASSERT_EQ(::write(p.raw1[1], junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  for (int i = 0; i < 100 && p.m0->openPeers()[1] != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(p.m0->openPeers(), (std::vector<int>{1, 0}));
  EXPECT_EQ(p.agree({3}, {4}), (std::vector<double>{4}));
}

TEST(ControlMeshTest, SilentPeerFailsAfterTheSilenceWindowNotTheTimeout) {
  Pair p(1, milliseconds(200));
  p.m1.reset();  // rank 1's process is gone: its ends close
  std::vector<double> v{1};
  auto t0 = std::chrono::steady_clock::now();
  try {
    p.m0->maxReduce(v, milliseconds(30000));
    FAIL() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
}

TEST(ControlMeshTest, AlivePeerThatNeverJoinsTheRoundTimesOut) {
  Pair p(1, milliseconds(100));
  std::vector<double> v{1};
  try {
    p.m0->maxReduce(v, milliseconds(600));  // rank 1 answers questions but sends no values
    FAIL() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("no word from rank(s) 1 within 600 ms"), std::string::npos)
        << e.what();
  }
}

TEST(ControlMeshTest, DifferentLengthsAreAConfigError) {
  Pair p(1);
  auto f = std::async(std::launch::async, [&] {
    std::vector<double> b{1, 2};
    try {
      p.m1->maxReduce(b, milliseconds(5000));
    } catch (const ConfigError&) {
    }
  });
  std::vector<double> a{1};
  EXPECT_THROW(p.m0->maxReduce(a, milliseconds(5000)), ConfigError);
  f.get();
}

TEST(ControlMeshTest, RailDownNoticeReachesThePeerOverTheOtherRail) {
  Pair p(2);
  ::shutdown(p.raw0[1], SHUT_RDWR);  // the rail that went down carries nothing
  p.m1->notifyRailDown(1, 7);
  for (int i = 0; i < 200 && p.downPeer.load() < 0; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(p.downPeer.load(), 1);
  EXPECT_EQ(p.downRail.load(), 1);
  EXPECT_EQ(p.downGen.load(), 7u);
}

TEST(ControlMeshTest, PeersBehindTellsALatePeerFromAnUnreachableOne) {
  Pair p(1, milliseconds(200));
  p.m0->setCurrentOp(3);
  p.m1->setCurrentOp(1);
  EXPECT_TRUE(p.m0->peersBehind(3));   // rank 1 answers: it is still at op 1
  EXPECT_FALSE(p.m1->peersBehind(1));  // rank 0 already started op 3
  p.m1->setCurrentOp(3);
  EXPECT_FALSE(p.m0->peersBehind(3));
  EXPECT_TRUE(p.m0->peersBehind(4));
  p.m1.reset();
  EXPECT_FALSE(p.m0->peersBehind(5));  // nobody answers: not "late", unreachable
}

// A peer that has not started this rank's operation but waits in a round this rank has not
// joined (a round-free operation it failed and this rank finished) is waiting for this rank:
// not behind, so a silent slice of this rank fails instead of waiting for it. Once the round
// is over, the same peer still at its older operation is behind again.
TEST(ControlMeshTest, APeerWaitingInARoundThisRankSkippedIsNotBehind) {
  Pair p(1, milliseconds(200));
  p.m0->setCurrentOp(2);  // finished op 1 without a round
  p.m1->setCurrentOp(1);  // failed op 1: it holds op 1's round
  EXPECT_TRUE(p.m0->peersBehind(2));
  auto inRound = std::async(std::launch::async, [&] {
    std::vector<double> b{2};
    p.m1->maxReduce(b, milliseconds(10000));
    return b[0];
  });
  bool behind = true;
  for (int i = 0; i < 200 && behind; ++i) behind = p.m0->peersBehind(2);  // until its step lands
  EXPECT_FALSE(behind) << "a peer waiting in a round for this rank was taken for late";
  std::vector<double> a{1};
  p.m0->maxReduce(a, milliseconds(10000));  // this rank joins: the round ends on both
  EXPECT_EQ(inRound.get(), 2.0);
  EXPECT_TRUE(p.m0->peersBehind(2));
}

// Heartbeats (peerSilence): a peer heard on no rail (every rail between us is a black hole)
// fails a round at once, by the heartbeat window, not after the round's own silence window
// (30 s here) or its timeout (30 s): the message names the window.
TEST(ControlMeshTest, PeerHeardOnNoRailFailsARoundByTheHeartbeatWindow) {
  Pair p(1, milliseconds(30000), /*silentRail0=*/true, milliseconds(100));
  // Rank 1 is heard once (its mesh was up), then every rail between us is a black hole.
  const std::string here = encodeMeshFrame(kMeshHere, 0, 0);
  ASSERT_EQ(::write(p.blackHole.get(), here.data(), here.size()),
            static_cast<ssize_t>(here.size()));
  for (int i = 0; i < 500 && p.m0->silentPeers().empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(10));  // polls for the state, bounded
  }
  EXPECT_EQ(p.m0->silentPeers(), (std::vector<int>{1}));
  std::vector<double> v{1};
  try {
    p.m0->maxReduce(v, milliseconds(30000));
    FAIL() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 answered nothing for 100 ms"),
              std::string::npos)
        << e.what();
  }
}

// A live peer that never joins the round keeps sending heartbeats: it is late, not unreachable,
// so the round ends by its timeout ("no word"), never by the 600 ms heartbeat window.
TEST(ControlMeshTest, HeartbeatsKeepALatePeerReachable) {
  Pair p(1, milliseconds(30000), false, milliseconds(600));
  std::vector<double> v{1};
  try {
    p.m0->maxReduce(v, milliseconds(1500));
    FAIL() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("no word from rank(s) 1 within 1500 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(p.m0->silentPeers().empty());
  EXPECT_TRUE(p.m1->silentPeers().empty());
}

// N ranks, every pair joined by one socket pair per rail (with `onlySet`, only the pairs a rail
// connects at start-up: transport/peer_set.h). With `fake` >= 0 that rank has no mesh: the test
// holds its ends (fakeEnds[rail][peer]) and speaks for it.
struct Mesh {
  std::vector<std::unique_ptr<ControlMesh>> m;
  std::vector<std::vector<Fd>> fakeEnds;

  Mesh(int n, int rails, milliseconds silence = milliseconds(300),
       milliseconds peerSilence = milliseconds(0), int fake = -1, bool onlySet = false) {
    for (int r = 0; r < n; ++r) {
      m.push_back(r == fake ? nullptr
                            : std::make_unique<ControlMesh>(
                                  r, n, rails, silence, [](int, int, uint64_t) {}, peerSilence));
    }
    for (int rail = 0; rail < rails; ++rail) {
      std::vector<std::vector<Fd>> conns(n);
      for (auto& c : conns) c.resize(n);
      for (int a = 0; a < n; ++a) {
        const std::vector<int> set = peersUsed(a, n);
        for (int b = a + 1; b < n; ++b) {
          if (onlySet && !std::binary_search(set.begin(), set.end(), b)) continue;
          int sv[2];
          EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
          conns[a][b] = Fd(sv[0]);
          conns[b][a] = Fd(sv[1]);
        }
      }
      for (int r = 0; r < n; ++r) {
        if (r == fake) {
          fakeEnds.push_back(std::move(conns[r]));
        } else {
          m[r]->attach(rail, std::move(conns[r]));
        }
      }
    }
  }

  // The fake rank's heartbeat: a HERE frame to each of its neighbours on every rail.
  void fakeBeat(int fake) {
    const std::string here = encodeMeshFrame(kMeshHere, 0, 0);
    for (auto& rail : fakeEnds) {
      for (int p : ControlMesh::neighboursOf(fake, static_cast<int>(m.size()))) {
        EXPECT_EQ(::send(rail[p].get(), here.data(), here.size(), MSG_NOSIGNAL | MSG_DONTWAIT),
                  static_cast<ssize_t>(here.size()));
      }
    }
  }

  // Polls (every 5 ms, up to `limit`) until `done` holds; returns whether it did.
  template <typename Pred>
  static bool waitFor(Pred done, milliseconds limit = milliseconds(20000)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }

  struct Outcome {
    std::vector<double> values;
    std::string error;
    bool railError = false, configError = false;
  };
  // The ranks in `ranks` run one round at once, rank r with in[r]; the others do nothing.
  std::vector<Outcome> round(const std::vector<std::vector<double>>& in,
                             const std::vector<int>& ranks, milliseconds timeout) {
    std::vector<Outcome> out(m.size());
    std::vector<std::future<void>> running;
    for (int r : ranks) {
      running.push_back(std::async(std::launch::async, [&, r] {
        out[r].values = in[r];
        try {
          m[r]->maxReduce(out[r].values, timeout);
        } catch (const RailError& e) {
          out[r].railError = true;
          out[r].error = e.what();
        } catch (const ConfigError& e) {
          out[r].configError = true;
          out[r].error = e.what();
        }
      }));
    }
    for (auto& f : running) f.get();
    return out;
  }
  std::vector<int> everyRank() const {
    std::vector<int> all(m.size());
    for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    return all;
  }
};

// At scale a rank attaches its mesh only once it has connected every rail to every peer, so a
// peer may attach (and start beating) seconds after this rank did. Rank 1 attaches and waits in
// a round for rank 0 through many of its heartbeat windows (counted in beats, each at least
// peerSilence / 5 apart) before rank 0 attaches at all: rank 0 is starting, not silent, and the
// round completes once it joins.
TEST(ControlMeshTest, PeerThatAttachesLateIsStartingNotSilent) {
  constexpr auto kPeerSilence = milliseconds(50);
  auto noDown = [](int, int, uint64_t) {};
  ControlMesh m0(0, 2, 1, milliseconds(300), noDown, kPeerSilence);
  ControlMesh m1(1, 2, 1, milliseconds(300), noDown, kPeerSilence);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<Fd> c0(2), c1(2);
  c0[1] = Fd(sv[0]);
  c1[0] = Fd(sv[1]);
  m1.attach(0, std::move(c1));
  const uint64_t from = m1.heartbeatStats().beats;
  auto late = std::async(std::launch::async, [&] {
    std::vector<double> v{1};
    m1.maxReduce(v, milliseconds(30000));
    return v;
  });
  // 15 beats: at least three whole peer silences with rank 0 heard on no rail.
  ASSERT_TRUE(Mesh::waitFor([&] { return m1.heartbeatStats().beats >= from + 15; }));
  EXPECT_TRUE(m1.silentPeers().empty());
  EXPECT_EQ(m1.heartbeatStats().verdictsSent, 0u);
  m0.attach(0, std::move(c0));
  std::vector<double> v{2};
  m0.maxReduce(v, milliseconds(30000));
  EXPECT_EQ(v, std::vector<double>{2});
  EXPECT_EQ(late.get(), std::vector<double>{2});
}

// A peer that dies before it was ever heard (its connections close) is still unreachable at
// once: a waiting round names it, and its watchers count it silent.
TEST(ControlMeshTest, PeerThatDiesBeforeItWasHeardIsStillDetected) {
  auto noDown = [](int, int, uint64_t) {};
  ControlMesh m1(1, 2, 1, milliseconds(30000), noDown, milliseconds(50));
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<Fd> c1(2);
  c1[0] = Fd(sv[1]);
  m1.attach(0, std::move(c1));
  ::close(sv[0]);  // rank 0's process is gone before its mesh ever started
  std::vector<double> v{1};
  try {
    m1.maxReduce(v, milliseconds(30000));
    FAIL() << "expected RailError";
  } catch (const RailError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 0 closed their control connections"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(Mesh::waitFor([&] { return m1.silentPeers() == std::vector<int>{0}; }));
}

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Values that make every rank's contribution matter: element i's max comes from a different
// rank for each i, and one element is the same everywhere.
std::vector<double> contribution(int rank, int n, int round) {
  return {static_cast<double>(rank) + round, -static_cast<double>(rank) * 0.25,
          static_cast<double>((rank * 5 + round) % n) + 1e-9 * rank, 3.5};
}

TEST(ControlMeshTest, DisseminationIsExactAndSendsCeilLog2NMessagesPerRound) {
  for (int n : {2, 3, 5, 8}) {
    SCOPED_TRACE(strCat("N=", n));
    Mesh mesh(n, 2);
    constexpr int kRounds = 6;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::vector<double>> in;
      std::vector<double> want(4, -1e300);
      for (int r = 0; r < n; ++r) {
        in.push_back(contribution(r, n, round));
        for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(want[i], in[r][i]);
      }
      const auto out = mesh.round(in, mesh.everyRank(), milliseconds(10000));
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(out[r].error, "") << "rank " << r;
        EXPECT_EQ(out[r].values, want) << "rank " << r << ", round " << round;
      }
    }
    for (int r = 0; r < n; ++r) {
      const auto st = mesh.m[r]->agreementStats();
      EXPECT_EQ(mesh.m[r]->stepsPerRound(), ceilLog2(n));
      EXPECT_EQ(st.rounds, static_cast<uint64_t>(kRounds));
      // The primary path: one message per step, ceil(log2 N) per round, whatever the copies.
      EXPECT_EQ(st.messages, static_cast<uint64_t>(kRounds * ceilLog2(n))) << "rank " << r;
      EXPECT_EQ(st.abortsSent, 0u);
    }
  }
}

// Rank 2 of 5 is alive (it answers questions) but never joins the round: the ranks that wait
// for its steps time out, and every other rank fails the round too (their aborts, or their own
// timeout), none completes.
TEST(ControlMeshTest, RankThatNeverJoinsFailsTheRoundOnEveryOtherRank) {
  constexpr int kN = 5;
  Mesh mesh(kN, 2, milliseconds(30000));
  std::vector<std::vector<double>> in(kN, std::vector<double>{1.0});
  const auto out = mesh.round(in, {0, 1, 3, 4}, milliseconds(800));
  for (int r : {0, 1, 3, 4}) {
    EXPECT_TRUE(out[r].railError) << "rank " << r << ": " << out[r].error;
    EXPECT_NE(out[r].error.find("within 800 ms"), std::string::npos)
        << "rank " << r << ": " << out[r].error;
  }
}

// Rank 3 of 8 vanishes (its connections close) as the others start a round: every other rank
// fails it with an error naming rank 3, long before the 30 s silence window or timeout — the
// ranks that wait for rank 3 see its connections close, the rest hear their aborts.
TEST(ControlMeshTest, RankThatVanishesFailsTheRoundOnEveryOtherRankNamingIt) {
  constexpr int kN = 8;
  Mesh mesh(kN, 2, milliseconds(30000));
  std::vector<std::vector<double>> in(kN, std::vector<double>{1.0, 2.0});
  const auto first = mesh.round(in, mesh.everyRank(), milliseconds(10000));
  for (int r = 0; r < kN; ++r) ASSERT_EQ(first[r].error, "") << "rank " << r;
  std::vector<int> others;
  for (int r = 0; r < kN; ++r) {
    if (r != 3) others.push_back(r);
  }
  std::vector<Mesh::Outcome> out;
  std::thread running([&] { out = mesh.round(in, others, milliseconds(30000)); });
  mesh.m[3].reset();
  running.join();
  for (int r : others) {
    EXPECT_TRUE(out[r].railError) << "rank " << r << ": " << out[r].error;
    EXPECT_NE(out[r].error.find("rank(s) 3 closed their control connections"), std::string::npos)
        << "rank " << r << ": " << out[r].error;
  }
}

// Rank 7 of 8 (the test speaks for it) is killed inside round 1 after its first two steps went
// out: every rank but rank 3 (which waits for its last step) completes the round. Rank 3 fails
// it naming rank 7 and leaves (closeAll, as failStop does). The others' next round must name
// rank 7 too — the cause rank 3 sent them — not rank 3, whose connections they find closed.
// With only the start-up set connected, rank 3's cause reaches the ranks it is not joined to by
// the ABORT its peers flood on.
void rankKilledInsideARound(bool onlySet) {
  constexpr int kN = 8, kKilled = 7, kLast = 3;  // kLast: kKilled's last step goes to it
  Mesh mesh(kN, 2, milliseconds(30000), milliseconds(0), kKilled, onlySet);
  const std::vector<double> one{1.0};
  for (int step : {0, 1}) {
    const std::string frame = encodeMeshStep(1, static_cast<uint16_t>(step), one);
    const int target = (kKilled + (1 << step)) % kN;
    ASSERT_EQ(::write(mesh.fakeEnds[0][target].get(), frame.data(), frame.size()),
              static_cast<ssize_t>(frame.size()));
  }
  std::vector<std::future<std::string>> first(kN);
  for (int r = 0; r < kN; ++r) {
    if (r == kKilled) continue;
    first[r] = std::async(std::launch::async, [&mesh, &one, r] {
      std::vector<double> v = one;
      try {
        mesh.m[r]->maxReduce(v, milliseconds(30000));
        return std::string();
      } catch (const RailError& e) {
        return std::string(e.what());
      }
    });
  }
  for (int r = 0; r < kN; ++r) {
    if (r != kKilled && r != kLast) {
      EXPECT_EQ(first[r].get(), "") << "rank " << r;
    }
  }
  mesh.fakeEnds.clear();  // rank 7 killed: its connections close
  const std::string lastError = first[kLast].get();
  EXPECT_NE(lastError.find("rank(s) 7 closed their control connections"), std::string::npos)
      << lastError;
  mesh.m[kLast]->closeAll();
  std::vector<std::vector<double>> in(kN, one);
  if (onlySet) {
    // Rank 6 is no peer of rank 3, and the sources of its round (5, 4, 2) are alive but do not
    // join: only the flooded ABORT ends its round before the timeout, and with the cause.
    const auto six = mesh.round(in, {6}, milliseconds(30000));
    EXPECT_NE(six[6].error.find("rank(s) 7 closed their control connections"), std::string::npos)
        << six[6].error;
  }
  // Rank 4 alone first: its first step's source is rank 3, whose connections it finds closed.
  const auto four = mesh.round(in, {4}, milliseconds(30000));
  const auto rest = mesh.round(in, {0, 1, 2, 5, 6}, milliseconds(30000));
  for (int r : {0, 1, 2, 4, 5, 6}) {
    const std::string& e = r == 4 ? four[r].error : rest[r].error;
    EXPECT_NE(e.find("rank(s) 7 closed their control connections"), std::string::npos)
        << "rank " << r << ": " << e;
  }
}

TEST(ControlMeshTest, RankKilledInsideARoundIsWhatEverySurvivorsNextRoundNames) {
  rankKilledInsideARound(false);
}

// Rank 3's peers at 8 ranks are 1, 2, 4, 5 and 7 (transport/peer_set.h): ranks 0 and 6 learn the
// cause only from the ABORT its peers flood on.
TEST(ControlMeshTest, RankKilledInsideARoundReachesNonPeersByTheFloodedAbort) {
  ASSERT_EQ(peersUsed(3, 8), (std::vector<int>{1, 2, 4, 5, 7}));
  rankKilledInsideARound(true);
}

// One rank of 4 calls with another length: the ranks that fold its steps see it, and every rank
// throws ConfigError — the others learn it from the aborts, with the cause.
TEST(ControlMeshTest, DifferentLengthsAreAConfigErrorOnEveryRank) {
  constexpr int kN = 4;
  Mesh mesh(kN, 1, milliseconds(30000));
  std::vector<std::vector<double>> in(kN, std::vector<double>{1.0});
  in[1] = {1.0, 2.0};
  const auto out = mesh.round(in, mesh.everyRank(), milliseconds(30000));
  for (int r = 0; r < kN; ++r) {
    EXPECT_TRUE(out[r].configError) << "rank " << r << ": " << out[r].error;
    EXPECT_NE(out[r].error.find("values, this rank"), std::string::npos)
        << "rank " << r << ": " << out[r].error;
  }
}

// The heartbeat graph: (r +- 2^k) mod N, k < ceil(log2 N), without duplicates or r itself;
// symmetric (a rank watches exactly the ranks that beat to it) and at most 2 ceil(log2 N) peers.
TEST(ControlMeshTest, HeartbeatNeighboursAreTheDisseminationPeersBothWays) {
  EXPECT_EQ(ControlMesh::neighboursOf(0, 2), (std::vector<int>{1}));
  EXPECT_EQ(ControlMesh::neighboursOf(0, 3), (std::vector<int>{1, 2}));
  EXPECT_EQ(ControlMesh::neighboursOf(0, 5), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(ControlMesh::neighboursOf(0, 8), (std::vector<int>{1, 2, 4, 6, 7}));
  EXPECT_EQ(ControlMesh::neighboursOf(3, 16), (std::vector<int>{1, 2, 4, 5, 7, 11, 15}));
  EXPECT_TRUE(ControlMesh::neighboursOf(0, 1).empty());
  for (int n : {2, 3, 5, 6, 8, 16, 100, 1024}) {
    for (int r = 0; r < n; ++r) {
      const auto mine = ControlMesh::neighboursOf(r, n);
      EXPECT_LE(mine.size(), static_cast<size_t>(2 * ceilLog2(n))) << "N=" << n;
      for (int p : mine) {
        const auto theirs = ControlMesh::neighboursOf(p, n);
        EXPECT_TRUE(std::binary_search(theirs.begin(), theirs.end(), r))
            << "N=" << n << ": " << r << " watches " << p << " but " << p << " does not beat to it";
      }
    }
  }
}

// Every beat sends one HERE frame per rail to each neighbour and to nobody else: rails x
// |neighbours| frames per beat (O(log N)), where all-to-all heartbeats sent rails x (N - 1).
TEST(ControlMeshTest, HeartbeatsPerBeatAreRailsTimesNeighbours) {
  constexpr int kRails = 2;
  for (int n : {2, 3, 5, 8, 16}) {
    SCOPED_TRACE(strCat("N=", n));
    Mesh mesh(n, kRails, milliseconds(30000), milliseconds(250));
    // Counted from a beat that began after every rail was attached: a beat in progress while
    // the mesh was built may have taken its connections before the last rail's (seen under
    // TSan), so the window opens only once each rank has finished one beat since. A snapshot
    // holds a beat's frames and its count together.
    std::vector<uint64_t> builtAt(n);
    for (int r = 0; r < n; ++r) builtAt[r] = mesh.m[r]->heartbeatStats().beats;
    ASSERT_TRUE(Mesh::waitFor([&] {
      for (int r = 0; r < n; ++r) {
        if (mesh.m[r]->heartbeatStats().beats < builtAt[r] + 1) return false;
      }
      return true;
    }));
    std::vector<ControlMesh::HeartbeatStats> from(n);
    for (int r = 0; r < n; ++r) from[r] = mesh.m[r]->heartbeatStats();
    ASSERT_TRUE(Mesh::waitFor([&] {
      for (int r = 0; r < n; ++r) {
        if (mesh.m[r]->heartbeatStats().beats < from[r].beats + 3) return false;
      }
      return true;
    }));
    for (int r = 0; r < n; ++r) {
      const auto st = mesh.m[r]->heartbeatStats();
      const auto& nb = mesh.m[r]->neighbours();
      EXPECT_EQ(nb, ControlMesh::neighboursOf(r, n));
      EXPECT_EQ(st.heartbeatsSent - from[r].heartbeatsSent,
                (st.beats - from[r].beats) * kRails * nb.size())
          << "rank " << r;
      if (n >= 8) {
        EXPECT_LT(nb.size(), static_cast<size_t>(n - 1)) << "rank " << r;
      }
    }
  }
}

// A rank that is gone (its connections close, nothing more from it) is known silent by its
// neighbours after the peer silence, and by every other rank — which never hears from it at
// all — through the verdict they flood: each rank's silentPeers() names it, and only it.
TEST(ControlMeshTest, GoneRankReachesNonNeighboursByTheFloodedVerdict) {
  for (int n : {8, 16}) {
    SCOPED_TRACE(strCat("N=", n));
    constexpr int kGone = 3;
    Mesh mesh(n, 2, milliseconds(30000), milliseconds(200));
    const auto& zeroWatches = mesh.m[0]->neighbours();
    ASSERT_FALSE(std::binary_search(zeroWatches.begin(), zeroWatches.end(), kGone));
    mesh.m[kGone].reset();
    const bool everyoneKnows = Mesh::waitFor([&] {
      for (int r = 0; r < n; ++r) {
        if (r != kGone && mesh.m[r]->silentPeers() != std::vector<int>{kGone}) return false;
      }
      return true;
    });
    for (int r = 0; r < n; ++r) {
      if (r != kGone) {
        EXPECT_EQ(mesh.m[r]->silentPeers(), std::vector<int>{kGone}) << "rank " << r;
      }
    }
    EXPECT_TRUE(everyoneKnows);
    EXPECT_GE(mesh.m[0]->heartbeatStats().verdictsTaken, 1u);  // rank 0 only heard it flooded
  }
}

// A rank that falls silent and then is heard again (the test speaks for rank 3: heartbeats,
// none, heartbeats again) is named by every rank while silent and by none once healed: its
// watchers hear it at once, the others' verdicts lapse (two silences at most), and nobody keeps
// passing the old verdict around.
TEST(ControlMeshTest, HealedRankIsSilentNowhereOnceHeardAgain) {
  constexpr int kN = 8, kFake = 3;
  constexpr auto kSilence = milliseconds(200);
  Mesh mesh(kN, 2, milliseconds(30000), kSilence, kFake);
  std::atomic<bool> beating{true}, stop{false};
  std::atomic<int> beats{0};
  std::thread fake([&] {
    while (!stop) {
      if (beating) {
        mesh.fakeBeat(kFake);
        ++beats;
      }
      std::this_thread::sleep_for(kSilence / 5);
    }
  });
  // Heard first (a rank never heard is still starting, and not judged).
  ASSERT_TRUE(Mesh::waitFor([&] { return beats.load() >= 2; }));
  auto everyRankSays = [&](const std::vector<int>& want) {
    return [&mesh, want] {
      for (int r = 0; r < kN; ++r) {
        if (r != kFake && mesh.m[r]->silentPeers() != want) return false;
      }
      return true;
    };
  };
  beating = false;
  EXPECT_TRUE(Mesh::waitFor(everyRankSays({kFake})));
  beating = true;
  EXPECT_TRUE(Mesh::waitFor(everyRankSays({})));
  stop = true;
  fake.join();
  for (int r = 0; r < kN; ++r) {
    if (r != kFake) {
      EXPECT_TRUE(mesh.m[r]->silentPeers().empty()) << "rank " << r;
    }
  }
}

// A rank that is only slow — alive, its heartbeats flowing, but it never joins the round — is
// never taken for a silent one, on any rank, for as long as the others wait for it (the round
// ends by its timeout, not by a verdict).
TEST(ControlMeshTest, SlowRankWithHeartbeatsIsNeverSilent) {
  constexpr int kN = 8, kSlow = 2;
  Mesh mesh(kN, 2, milliseconds(30000), milliseconds(400));
  std::vector<int> others;
  for (int r = 0; r < kN; ++r) {
    if (r != kSlow) others.push_back(r);
  }
  std::atomic<bool> roundOver{false};
  std::vector<std::string> seenSilent;
  std::thread watch([&] {
    while (!roundOver) {
      for (int r = 0; r < kN; ++r) {
        const auto silent = mesh.m[r]->silentPeers();
        if (!silent.empty()) seenSilent.push_back(strCat("rank ", r, " saw ", silent[0]));
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  std::vector<std::vector<double>> in(kN, std::vector<double>{1.0});
  const auto out = mesh.round(in, others, milliseconds(2000));
  roundOver = true;
  watch.join();
  EXPECT_TRUE(seenSilent.empty()) << seenSilent.front();
  for (int r : others) {
    EXPECT_NE(out[r].error.find("within 2000 ms"), std::string::npos)
        << "rank " << r << ": " << out[r].error;
  }
  for (int r = 0; r < kN; ++r) EXPECT_EQ(mesh.m[r]->heartbeatStats().verdictsSent, 0u);
}

// A verdict naming a rank outside the job (or beyond any int) is garbage on that connection:
// it is dropped, the other rails carry on.
TEST(ControlMeshTest, VerdictOnARankOutsideTheJobDropsThatConnection) {
  Pair p(3);
  const std::string beyondInt = encodeMeshSilent(uint64_t{1} << 40, 0);
  const std::string beyondJob = encodeMeshSilent(99, 0);
  ASSERT_EQ(::write(p.raw1[0], beyondInt.data(), beyondInt.size()),
            static_cast<ssize_t>(beyondInt.size()));
  ASSERT_EQ(::write(p.raw1[1], beyondJob.data(), beyondJob.size()),
            static_cast<ssize_t>(beyondJob.size()));
  EXPECT_TRUE(Mesh::waitFor([&] { return p.m0->openPeers() == std::vector<int>{0, 0, 1}; }));
  EXPECT_EQ(p.m0->openPeers(), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(p.agree({3}, {4}), (std::vector<double>{4}));
}

// Without heartbeats (peerSilence 0) nobody is ever "silent" by the clock alone.
TEST(ControlMeshTest, NoHeartbeatsNoSilentPeers) {
  Pair p(1, milliseconds(300), /*silentRail0=*/true);
  EXPECT_TRUE(p.m0->silentPeers().empty());
  EXPECT_EQ(p.m0->peerSilence(), milliseconds(0));
}

}  // namespace
}  // namespace nezha
