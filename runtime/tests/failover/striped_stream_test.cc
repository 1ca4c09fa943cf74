// The engine without a communicator: a small point-to-point client — the shape the NCCL net
// plugin needs — that stripes a stream of messages from rank 0 to rank 1 over two TCP rails with
// the scheduler (split) and the failover engine (replay, agreement, re-admission), and survives
// a rail cut. Each rank builds only what the engine needs: transports, the control mesh over
// their control connections, a scheduler; no rendezvous, no Communicator.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "failover/control_mesh.h"
#include "failover/failover_engine.h"
#include "schedule/algo_table.h"
#include "schedule/scheduler.h"
#include "test_util.h"
#include "transport/transport.h"

namespace nezha {
namespace {

using testing::kTestToken;
using testing::runRanks;

constexpr size_t kMessageBytes = 2 << 20;
constexpr int kCutAt = 8;  // the message before which rank 0 cuts rail r1

uint8_t pattern(int message, size_t i) { return static_cast<uint8_t>(message * 131 + i * 7 + 1); }

Options streamOptions(int rank) {
  Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.rails = {{"r0", "", "tcp", "127.0.0.1"}, {"r1", "", "tcp", "127.0.0.2"}};
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  o.coldThreshold = 64 << 10;
  o.readmitHoldDown = std::chrono::milliseconds(50);
  return o;
}

// What each rank of the stream saw.
struct StreamResult {
  int messages = 0;
  std::vector<int> badMessages;      // received bytes that differ from what was sent
  std::vector<int> railsPerMessage;  // how many rails carried each message
  Metrics metrics;
};

// One rank of the stream: sends (rank 0) or receives (rank 1) messages, one engine operation
// each, until `wanted` messages have gone after rail r1 came back.
void streamRank(int rank, std::vector<std::unique_ptr<Transport>> transports, const JobTable& job,
                StreamResult& result) {
  const Options o = streamOptions(rank);
  std::vector<RailInfo> rails;
  for (const RailSpec& s : o.rails)
    rails.push_back(RailInfo{s.name, s.iface, s.transport, s.address});
  Metrics& metrics = result.metrics;
  FailoverEngine engine(o, rails, metrics, [&o, &rails](int rail) {
    return makeTransport(o, rail, rails[rail].address);
  });
  for (size_t i = 0; i < transports.size(); ++i) {
    transports[i]->connect(job, Clock::now() + std::chrono::seconds(20));
  }
  ControlMesh mesh(
      rank, o.worldSize, rails.size(), std::chrono::milliseconds(1000),
      [&engine](int peer, int rail, uint64_t gen) { engine.onPeerRailDown(peer, rail, gen); },
      o.peerSilence);
  for (size_t i = 0; i < transports.size(); ++i) {
    mesh.attach(static_cast<int>(i), transports[i]->releaseControl());
  }
  std::vector<std::unique_ptr<Channel>> channels;
  for (auto& t : transports) channels.push_back(std::move(t));
  engine.adoptChannels(std::move(channels), {true, true});
  engine.setAgreement(&mesh);
  engine.setJob(job, AlgoTable().options());
  // Both ranks start from the same probe values, so they plan the same splits.
  ProbeResult probe{{1e-4, 1e-4}, {1e8, 1e8}};
  Scheduler sched(o, probe, Table({"r0", "r1"}));
  engine.setScheduler(&sched);

  std::vector<uint8_t> buf(kMessageBytes);
  int afterReadmission = -1;
  for (int m = 0; afterReadmission < 4; ++m) {
    ASSERT_LT(m, 5000) << "rail r1 never came back";
    if (rank == 0 && m == kCutAt) engine.abortRail(1);  // an operator's cut, between messages
    if (rank == 0) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(m, i);
    } else {
      std::fill(buf.begin(), buf.end(), 0);
    }
    engine.beginOp(static_cast<uint64_t>(m));
    auto makePlan = [&] { return sched.plan(OpKind::kBroadcast, buf.size(), 1); };
    FailoverEngine::MakeSliceFn make = [rank](const char*, char* dst) -> FailoverEngine::SliceFn {
      return [rank, dst](Channel& ch, Scratch&, const Slice& s) {
        std::vector<IoOp> ops{rank == 0 ? IoOp::send(1, dst + s.offset, s.count)
                                        : IoOp::recv(0, dst + s.offset, s.count)};
        ch.exchange(ops);
      };
    };
    Plan plan;
    char* data = reinterpret_cast<char*>(buf.data());
    FailoverEngine::Outcome ran =
        engine.runOp(OpKind::kBroadcast, makePlan, data, 0, data, 0, false, make, plan);
    if (!ran.replayed) sched.record(plan, ran.secs);
    std::vector<bool> used(rails.size(), false);
    for (const Slice& s : ran.done) used[s.rail] = true;
    result.railsPerMessage.push_back(static_cast<int>(std::count(used.begin(), used.end(), true)));
    if (rank == 1) {
      for (size_t i = 0; i < buf.size(); ++i) {
        if (buf[i] != pattern(m, i)) {
          result.badMessages.push_back(m);
          break;
        }
      }
    }
    if (afterReadmission >= 0 || !metrics.readmissions.empty()) ++afterReadmission;
    result.messages = m + 1;
  }
}

TEST(StripedStreamTest, StripesMessagesOverTwoRailsAndSurvivesACut) {
  // Transports listen first, so the job table can name every endpoint.
  std::vector<std::vector<std::unique_ptr<Transport>>> transports(2);
  JobTable job;
  job.session = "striped-stream";
  for (int r = 0; r < 2; ++r) {
    const Options o = streamOptions(r);
    RankInfo info;
    info.rank = r;
    info.worldSize = 2;
    for (int rail = 0; rail < 2; ++rail) {
      transports[r].push_back(makeTransport(o, rail, o.rails[rail].address));
      info.rails.push_back(transports[r].back()->endpoint());
    }
    job.ranks.push_back(info);
  }
  StreamResult results[2];
  runRanks(2, [&](int r) { streamRank(r, std::move(transports[r]), job, results[r]); });

  EXPECT_EQ(results[0].messages, results[1].messages);
  EXPECT_TRUE(results[1].badMessages.empty()) << "first bad message " << results[1].badMessages[0];
  for (const StreamResult& res : results) {
    // Before the cut every message went over both rails; right after it, over r0 alone.
    ASSERT_GT(res.railsPerMessage.size(), static_cast<size_t>(kCutAt + 1));
    for (int m = 0; m < kCutAt; ++m) EXPECT_EQ(res.railsPerMessage[m], 2) << "message " << m;
    EXPECT_EQ(res.railsPerMessage[kCutAt + 1], 1);
    // One failover of r1, agreed at the same message on both ranks, and r1 back afterwards
    // carrying its share again.
    ASSERT_EQ(res.metrics.failovers.size(), 1u);
    EXPECT_EQ(res.metrics.failovers[0].rail, "r1");
    EXPECT_EQ(res.metrics.failovers[0].op, static_cast<uint64_t>(kCutAt));
    ASSERT_EQ(res.metrics.readmissions.size(), 1u);
    EXPECT_EQ(res.metrics.readmissions[0].rail, "r1");
    EXPECT_EQ(res.railsPerMessage.back(), 2);
  }
  EXPECT_EQ(results[0].metrics.readmissions[0].op, results[1].metrics.readmissions[0].op);
}

}  // namespace
}  // namespace nezha
