// The transport contract (transport/channel.h), one suite run over every transport the build
// has, the way Gloo runs its tests over each of its transports: ranks are threads in one
// process, rails sit on loopback. TCP runs as it is; RDMA runs against the libibverbs test
// double (ctest puts it on LD_LIBRARY_PATH; verbs_test.cc proves that the double is what gets
// loaded). Every wait on another thread is an event (a promise, an atomic); the only clocks
// read are lower bounds a deadline guarantees.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "test_util.h"
#include "transport/fake_hca.h"
#include "transport/transport.h"

namespace nezha {
namespace {

using std::chrono::milliseconds;
using testing::kTestToken;
using testing::runRanks;

struct TransportCase {
  std::string transport;  // RailSpec::transport
  int streamsPerPeer;     // tcp: each message is split across this many connections
};

void PrintTo(const TransportCase& c, std::ostream* os) {
  *os << c.transport << " with " << c.streamsPerPeer << " stream(s) per peer";
}

std::string caseName(const ::testing::TestParamInfo<TransportCase>& info) {
  return info.param.transport + "_" + std::to_string(info.param.streamsPerPeer) + "streams";
}

// A bound on a hang, not a timing assertion: the event follows from the other thread's work.
bool happens(std::shared_future<void> event) {
  return event.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
}

uint8_t pattern(int from, int to, size_t salt, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + salt * 13 + i + (i >> 8) * 5);
}

std::vector<uint8_t> patterned(int from, int to, size_t salt, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = pattern(from, to, salt, i);
  return v;
}

std::string whatOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const RailError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected RailError";
  return {};
}

class ContractTest : public ::testing::TestWithParam<TransportCase> {
 protected:
  // Harmless for TCP; the RDMA cases find their device through it.
  static void SetUpTestSuite() { hca_ = std::make_unique<testing::FakeHcaOnLoopback>(); }
  static void TearDownTestSuite() { hca_.reset(); }

  // Connected channels of one rail, one per rank.
  std::vector<std::unique_ptr<Transport>> connectRanks(
      int ranks, milliseconds ioTimeout = milliseconds(20000)) {
    std::vector<std::unique_ptr<Transport>> ts;
    JobTable job;
    job.session = "contract-" + GetParam().transport;
    for (int r = 0; r < ranks; ++r) {
      Options o;
      o.rank = r;
      o.worldSize = ranks;
      o.rails = {{"r0", "lo", GetParam().transport, "127.0.0.1"}};
      o.jobToken = kTestToken;
      o.ioTimeout = ioTimeout;
      o.streamsPerPeer = GetParam().streamsPerPeer;
      ts.push_back(makeTransport(o, 0, "127.0.0.1"));
      job.ranks.push_back(RankInfo{r, ranks, "", {ts.back()->endpoint()}});
    }
    runRanks(ranks, [&](int r) {
      ts[r]->connect(job, Clock::now() + std::chrono::seconds(20));
      ts[r]->releaseControl();
    });
    return ts;
  }

  static std::unique_ptr<testing::FakeHcaOnLoopback> hca_;
};
std::unique_ptr<testing::FakeHcaOnLoopback> ContractTest::hca_;

// Ordering: ops to the same peer in the same direction complete in posting order, within an
// exchange and across exchanges. Sizes differ per position, so any reordering garbles data.
TEST_P(ContractTest, OpsToOnePeerCompleteInPostingOrderAcrossExchanges) {
  const int ranks = 3;
  auto ts = connectRanks(ranks);
  const std::vector<size_t> sizes = {1, 4097, (128 << 10) + 1, 200003, (1 << 20) + 5};
  runRanks(ranks, [&](int r) {
    for (size_t round = 0; round < 3; ++round) {
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<std::pair<int, size_t>> inFrom;  // (peer, salt) of each receive
      for (int p = 0; p < ranks; ++p) {
        if (p == r) continue;
        for (size_t j = 0; j < sizes.size(); ++j) {
          const size_t len = sizes[(j + round) % sizes.size()];
          out.push_back(patterned(r, p, round * 10 + j, len));
          in.emplace_back(len, 0);
          inFrom.emplace_back(p, round * 10 + j);
        }
      }
      std::vector<IoOp> ops;
      for (size_t k = 0; k < out.size(); ++k) {
        const int p = inFrom[k].first;
        ops.push_back(IoOp::send(p, out[k].data(), out[k].size()));
        ops.push_back(IoOp::recv(p, in[k].data(), in[k].size()));
      }
      ts[r]->exchange(ops);
      for (size_t k = 0; k < in.size(); ++k) {
        ASSERT_EQ(in[k], patterned(inFrom[k].first, r, inFrom[k].second, in[k].size()))
            << "round " << round << " receive " << k << " from rank " << inFrom[k].first;
      }
    }
  });
}

// Element boundaries: onRecv reports only whole elements, every byte exactly once, and what it
// reports is already final.
TEST_P(ContractTest, ReceivesReportWholeFinalElementsExactlyOnce) {
  auto ts = connectRanks(2);
  const size_t aligns[2] = {12, 8};  // rank r receives elements of aligns[r]
  runRanks(2, [&](int r) {
    const int peer = 1 - r;
    const size_t sendAlign = aligns[peer], recvAlign = aligns[r];
    const std::vector<uint8_t> out = patterned(r, peer, 1, sendAlign * 300007);
    const std::vector<uint8_t> want = patterned(peer, r, 1, recvAlign * 300007);
    std::vector<uint8_t> in(want.size(), 0);
    std::vector<int> seen(want.size() / recvAlign, 0);
    bool finalWhenReported = true;
    auto onRecv = [&](size_t off, size_t n) {
      ASSERT_EQ(off % recvAlign, 0u);
      ASSERT_EQ(n % recvAlign, 0u);
      ASSERT_LE(off + n, in.size());
      for (size_t e = off / recvAlign; e < (off + n) / recvAlign; ++e) ++seen[e];
      finalWhenReported &= std::equal(in.begin() + off, in.begin() + off + n, want.begin() + off);
    };
    std::vector<IoOp> ops = {IoOp::send(peer, out.data(), out.size(), sendAlign),
                             IoOp::recv(peer, in.data(), in.size(), recvAlign, onRecv)};
    ts[r]->exchange(ops);
    EXPECT_EQ(in, want);
    EXPECT_TRUE(finalWhenReported);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size()));
  });
}

// Many small ops to one peer in one exchange (more than TCP gathers into one call, with
// element sizes that differ from op to op, a signed header's 44 among them): each receive's
// onRecv reports whole, final elements of that op only, every byte exactly once, and the data
// lands in posting order.
TEST_P(ContractTest, SmallOpsBackToBackReportEachOpsElementsExactlyOnce) {
  auto ts = connectRanks(2);
  const std::vector<size_t> aligns = {44, 4, 1, 8, 12, 2, 44, 16, 4, 1, 8, 44, 3, 4, 2, 8, 44};
  runRanks(2, [&](int r) {
    const int peer = 1 - r;
    std::vector<std::vector<uint8_t>> out, in, want;
    std::vector<std::vector<int>> seen;
    std::vector<int> badReports(aligns.size(), 0);
    for (size_t k = 0; k < aligns.size(); ++k) {
      const size_t len = aligns[k] * (1 + k % 5);
      out.push_back(patterned(r, peer, k, len));
      want.push_back(patterned(peer, r, k, len));
      in.emplace_back(len, 0);
      seen.emplace_back(len / aligns[k], 0);
    }
    std::vector<IoOp> ops;
    for (size_t k = 0; k < aligns.size(); ++k) {
      ops.push_back(IoOp::send(peer, out[k].data(), out[k].size(), aligns[k]));
    }
    for (size_t k = 0; k < aligns.size(); ++k) {
      const size_t a = aligns[k];
      ops.push_back(
          IoOp::recv(peer, in[k].data(), in[k].size(), a, [&, k, a](size_t off, size_t n) {
            const bool whole = off % a == 0 && n % a == 0 && off + n <= in[k].size();
            if (!whole ||
                !std::equal(in[k].begin() + off, in[k].begin() + off + n, want[k].begin() + off)) {
              ++badReports[k];
              return;
            }
            for (size_t e = off / a; e < (off + n) / a; ++e) ++seen[k][e];
          }));
    }
    ts[r]->exchange(ops);
    for (size_t k = 0; k < aligns.size(); ++k) {
      EXPECT_EQ(in[k], want[k]) << "receive " << k;
      EXPECT_EQ(badReports[k], 0) << "receive " << k;
      EXPECT_EQ(std::count(seen[k].begin(), seen[k].end(), 1), static_cast<long>(seen[k].size()))
          << "receive " << k;
    }
  });
}

// A chain 0 -> 1 -> 2 in one exchange: rank 1 forwards only what has arrived (IoOp::after).
TEST_P(ContractTest, ForwardingSendsPassOnWhatArrived) {
  auto ts = connectRanks(3);
  const size_t len = (3 << 20) + 12;  // not a multiple of a staging slot, a multiple of 4
  const std::vector<uint8_t> src = patterned(0, 2, 3, len);
  std::vector<uint8_t> mid(len, 0), dst(len, 0);
  size_t reported = 0;
  runRanks(3, [&](int r) {
    std::vector<IoOp> ops;
    ops.reserve(2);
    if (r == 0) ops.push_back(IoOp::send(1, src.data(), len, 4));
    if (r == 1) {
      ops.push_back(IoOp::recv(0, mid.data(), len, 4, [&](size_t, size_t n) { reported += n; }));
      ops.push_back(IoOp::forward(2, mid.data(), len, 4, &ops[0]));
    }
    if (r == 2) ops.push_back(IoOp::recv(1, dst.data(), len, 4));
    ts[r]->exchange(ops);
  });
  EXPECT_EQ(dst, src);
  EXPECT_EQ(reported, len);
}

// Deadline: a receive nobody answers fails with RailError once the progress timeout passed (not
// before), the peer learns at once (its own exchange fails without waiting for its timeout),
// and the failed channel stays broken.
TEST_P(ContractTest, SilenceFailsTheRailAtTheProgressTimeout) {
  auto ts = connectRanks(2);
  std::vector<uint8_t> buf(64);
  ts[0]->setProgressTimeout(milliseconds(50));
  std::vector<IoOp> ops = {IoOp::recv(1, buf.data(), buf.size())};
  const auto start = Clock::now();
  const std::string why = whatOf([&] { ts[0]->exchange(ops); });
  EXPECT_GE(Clock::now() - start, milliseconds(50));
  EXPECT_NE(why.find("no progress for 50 ms"), std::string::npos) << why;
  std::vector<IoOp> peerOps = {IoOp::recv(0, buf.data(), buf.size())};
  const std::string peerWhy = whatOf([&] { ts[1]->exchange(peerOps); });
  EXPECT_EQ(peerWhy.find("no progress"), std::string::npos) << peerWhy;
  EXPECT_NE(whatOf([&] { ts[0]->exchange(ops); }).find("used after an earlier failure"),
            std::string::npos);
}

// The progress timeout never exceeds the transport's I/O timeout, and zero means that default.
TEST_P(ContractTest, ProgressTimeoutIsCappedByTheIoTimeout) {
  for (milliseconds asked : {milliseconds(3600000), milliseconds(0)}) {
    auto ts = connectRanks(2, milliseconds(1000));
    std::vector<uint8_t> buf(64);
    ts[0]->setProgressTimeout(asked);
    // A bound on a hang (an uncapped timeout waits an hour), 30 times the expected wait.
    const auto start = Clock::now();
    ts[0]->setProgressWatch([&](Clock::time_point) {
      return Clock::now() - start > std::chrono::seconds(30) ? std::string("not capped")
                                                             : std::string();
    });
    std::vector<IoOp> ops = {IoOp::recv(1, buf.data(), buf.size())};
    const std::string why = whatOf([&] { ts[0]->exchange(ops); });
    EXPECT_NE(why.find("no progress for 1000 ms"), std::string::npos)
        << "asked " << asked.count() << " ms: " << why;
  }
}

// A late peer: while peersStillComing says a peer has not reached the operation, the exchange
// outlives its deadline, and completes once the peer's data comes.
TEST_P(ContractTest, LatePeerKeepsTheExchangeAlivePastTheDeadline) {
  auto ts = connectRanks(2);
  const milliseconds timeout(50);
  ts[0]->setProgressTimeout(timeout);
  std::atomic<bool> sent{false};
  std::promise<void> askedTwice;
  int asked = 0;
  ts[0]->setPeersStillComing([&] {
    if (++asked == 2) askedTwice.set_value();
    return !sent.load();
  });
  const std::vector<uint8_t> out = patterned(1, 0, 4, 4096);
  std::vector<uint8_t> in(out.size(), 0);
  std::shared_future<void> late = askedTwice.get_future().share();
  Clock::time_point start;
  runRanks(2, [&](int r) {
    if (r == 0) {
      std::vector<IoOp> ops = {IoOp::recv(1, in.data(), in.size())};
      start = Clock::now();
      ts[0]->exchange(ops);
      EXPECT_GE(Clock::now() - start, 2 * timeout);  // two deadlines passed while it waited
    } else {
      ASSERT_TRUE(happens(late));
      std::vector<IoOp> ops = {IoOp::send(0, out.data(), out.size())};
      ts[1]->exchange(ops);
      sent = true;
    }
  });
  EXPECT_EQ(in, out);
  EXPECT_GE(asked, 2);
}

// Once the late peer has arrived it gets one more deadline of its own; then silence fails.
TEST_P(ContractTest, ArrivedPeerGetsOneMoreDeadlineThenSilenceFails) {
  auto ts = connectRanks(2);
  std::vector<uint8_t> buf(64);
  ts[0]->setProgressTimeout(milliseconds(50));
  int asked = 0;
  ts[0]->setPeersStillComing([&] { return ++asked <= 2; });  // late twice, then here
  std::vector<IoOp> ops = {IoOp::recv(1, buf.data(), buf.size())};
  const std::string why = whatOf([&] { ts[0]->exchange(ops); });
  EXPECT_NE(why.find("no progress for 50 ms"), std::string::npos) << why;
  EXPECT_EQ(asked, 4);  // late, late, arrived (one more deadline), silent: fail
}

// A peer that never comes is waited for no longer than the I/O timeout.
TEST_P(ContractTest, LatePeerIsWaitedForAtMostTheIoTimeout) {
  const milliseconds ioTimeout(1000);
  auto ts = connectRanks(2, ioTimeout);
  std::vector<uint8_t> buf(64);
  ts[0]->setProgressTimeout(milliseconds(50));
  int asked = 0;
  ts[0]->setPeersStillComing([&] { return ++asked > 0; });  // always still coming
  std::vector<IoOp> ops = {IoOp::recv(1, buf.data(), buf.size())};
  const auto start = Clock::now();
  const std::string why = whatOf([&] { ts[0]->exchange(ops); });
  EXPECT_GE(Clock::now() - start, ioTimeout);
  EXPECT_NE(why.find("no progress for 50 ms"), std::string::npos) << why;
  EXPECT_GE(asked, 2);
}

// abort() from another thread fails the exchange waiting on the rail at once (not by its
// deadline), the peer's exchange too, and every later exchange on both ends.
TEST_P(ContractTest, AbortFromAnotherThreadFailsTheExchangeInFlight) {
  auto ts = connectRanks(2);
  std::promise<void> inFlight;
  bool signalled = false;
  ts[1]->setProgressWatch([&](Clock::time_point) {
    if (!signalled) inFlight.set_value();
    signalled = true;
    return std::string();
  });
  std::shared_future<void> waiting = inFlight.get_future().share();
  std::vector<uint8_t> buf(1024);
  std::thread aborter([&] {
    if (happens(waiting)) ts[1]->abort();  // rank 1 is inside exchange(), waiting for rank 0
  });
  std::vector<IoOp> ops = {IoOp::recv(0, buf.data(), buf.size())};
  const std::string why = whatOf([&] { ts[1]->exchange(ops); });
  aborter.join();
  EXPECT_EQ(why.find("no progress"), std::string::npos) << why;
  std::vector<IoOp> peerOps = {IoOp::recv(1, buf.data(), buf.size())};
  const std::string peerWhy = whatOf([&] { ts[0]->exchange(peerOps); });
  EXPECT_NE(peerWhy.find("rank 1"), std::string::npos) << peerWhy;
  EXPECT_EQ(peerWhy.find("no progress"), std::string::npos) << peerWhy;
  EXPECT_THROW(ts[1]->exchange(ops), RailError);
  EXPECT_THROW(ts[0]->exchange(peerOps), RailError);
}

// Progress reporting, receiving: the watch is shown when bytes last arrived. Rank 1 sends the
// second message only after rank 0's watch saw the first one's arrival inside the exchange.
TEST_P(ContractTest, ProgressWatchSeesBytesArrive) {
  auto ts = connectRanks(2);
  const std::vector<uint8_t> a = patterned(1, 0, 5, 100000), b = patterned(1, 0, 6, 3000);
  std::vector<uint8_t> inA(a.size(), 0), inB(b.size(), 0);
  std::promise<void> sawArrival;
  std::shared_future<void> arrival = sawArrival.get_future().share();
  Clock::time_point start;
  bool signalled = false;
  ts[0]->setProgressWatch([&](Clock::time_point last) {
    if (last > start && !signalled) {
      signalled = true;
      sawArrival.set_value();
    }
    return std::string();
  });
  runRanks(2, [&](int r) {
    if (r == 0) {
      std::vector<IoOp> ops = {IoOp::recv(1, inA.data(), inA.size()),
                               IoOp::recv(1, inB.data(), inB.size())};
      start = Clock::now();
      ts[0]->exchange(ops);
    } else {
      std::vector<IoOp> first = {IoOp::send(0, a.data(), a.size())};
      ts[1]->exchange(first);
      ASSERT_TRUE(happens(arrival));
      std::vector<IoOp> second = {IoOp::send(0, b.data(), b.size())};
      ts[1]->exchange(second);
    }
  });
  EXPECT_TRUE(signalled);
  EXPECT_EQ(inA, a);
  EXPECT_EQ(inB, b);
}

// Progress reporting, silence: starting an exchange is not progress, so a silent receive shows
// the watch the arrival of the exchange before; the watch's verdict fails the rail with its
// reason, and the peer learns.
TEST_P(ContractTest, ProgressWatchVerdictFailsTheRail) {
  auto ts = connectRanks(2);
  std::vector<uint8_t> out = patterned(1, 0, 7, 5000), in(out.size(), 0);
  runRanks(2, [&](int r) {
    std::vector<IoOp> ops = {r == 0 ? IoOp::recv(1, in.data(), in.size())
                                    : IoOp::send(0, out.data(), out.size())};
    ts[r]->exchange(ops);
  });
  const auto afterFirst = Clock::now();
  std::vector<Clock::time_point> shown;
  ts[0]->setProgressWatch([&](Clock::time_point last) {
    shown.push_back(last);
    return shown.size() >= 3 ? std::string("watch says stalled") : std::string();
  });
  std::vector<IoOp> ops = {IoOp::recv(1, in.data(), in.size())};
  const std::string why = whatOf([&] { ts[0]->exchange(ops); });
  EXPECT_NE(why.find("watch says stalled"), std::string::npos) << why;
  ASSERT_EQ(shown.size(), 3u);
  for (const auto& t : shown) {
    EXPECT_LE(t, afterFirst);
    EXPECT_EQ(t, shown[0]);
  }
  std::vector<IoOp> peerOps = {IoOp::recv(0, in.data(), in.size())};
  EXPECT_EQ(whatOf([&] { ts[1]->exchange(peerOps); }).find("no progress"), std::string::npos);
}

// Progress reporting, sending: with nothing to receive the watch is shown this exchange's own
// movement, never a time before it started. The receiver comes only once the sender waits.
TEST_P(ContractTest, ProgressWatchOfASendShowsTheExchangesMovement) {
  auto ts = connectRanks(2);
  const std::vector<uint8_t> out = patterned(0, 1, 8, 64 << 20);  // more than buffers hold
  std::vector<uint8_t> in(out.size(), 0);
  std::promise<void> senderWaits;
  std::shared_future<void> waits = senderWaits.get_future().share();
  Clock::time_point start;
  std::vector<Clock::time_point> shown;
  ts[0]->setProgressWatch([&](Clock::time_point last) {
    if (shown.empty()) senderWaits.set_value();
    shown.push_back(last);
    return std::string();
  });
  runRanks(2, [&](int r) {
    if (r == 0) {
      std::vector<IoOp> ops = {IoOp::send(1, out.data(), out.size())};
      start = Clock::now();
      ts[0]->exchange(ops);
    } else {
      ASSERT_TRUE(happens(waits));
      std::vector<IoOp> ops = {IoOp::recv(0, in.data(), in.size())};
      ts[1]->exchange(ops);
    }
  });
  EXPECT_EQ(in, out);
  ASSERT_FALSE(shown.empty());
  for (const auto& t : shown) EXPECT_GE(t, start);
}

std::vector<TransportCase> transportsOfThisBuild() {
  std::vector<TransportCase> cases = {{"tcp", 1}, {"tcp", 3}};
#ifdef NEZHA_WITH_VERBS
  cases.push_back({"rdma", 1});
#endif
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Transports, ContractTest, ::testing::ValuesIn(transportsOfThisBuild()),
                         caseName);

}  // namespace
}  // namespace nezha
