// The init probe's latency estimate: noise on a shared host (a rank descheduled, a peer late)
// only adds time and comes in bursts. A burst during part of the probe must not make a rail
// look slow, or every small operation goes to a worse rail for the whole job (the bench saw
// exactly that: 52 us against 15 us for two equal rails).
#include "schedule/probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

namespace nezha {
namespace {

// Rank 0 of a 2-rank rail whose peer answers at once with zeros. The first `stalls` tiny
// exchanges (one 8-byte receive: the latency probe's allreduce) each take `stall` longer: the
// burst of host noise.
class StallingChannel : public Channel {
 public:
  StallingChannel(int rail, int stalls, std::chrono::milliseconds stall)
      : rail_(rail), name_("r" + std::to_string(rail)), stalls_(stalls), stall_(stall) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int railIndex() const override { return rail_; }
  const std::string& name() const override { return name_; }
  void exchange(std::vector<IoOp>& ops) override {
    size_t received = 0;
    for (IoOp& op : ops) {
      if (op.kind != IoOp::kRecv) continue;
      std::memset(op.buf, 0, op.len);
      if (op.onRecv) op.onRecv(0, op.len);
      received += op.len;
    }
    if (received == sizeof(double) && stalls_ > 0) {
      --stalls_;
      std::this_thread::sleep_for(stall_);
    }
  }
  void abort() override {}
  void setProgressTimeout(std::chrono::milliseconds) override {}
  void setPeersStillComing(std::function<bool()>) override {}
  void setProgressWatch(ProgressWatch) override {}

 private:
  int rail_;
  std::string name_;
  int stalls_;
  std::chrono::milliseconds stall_;
};

ProbeResult probeWithStalls(const std::vector<int>& stallsPerRail) {
  constexpr std::chrono::milliseconds kStall{20};
  Options o;
  o.worldSize = 2;
  o.probeBytes = 4096;
  std::vector<std::unique_ptr<StallingChannel>> channels;
  for (size_t r = 0; r < stallsPerRail.size(); ++r) {
    o.rails.push_back({"r" + std::to_string(r), "lo", "tcp", "127.0.0.1"});
    channels.push_back(
        std::make_unique<StallingChannel>(static_cast<int>(r), stallsPerRail[r], kStall));
  }
  std::vector<Scratch> scratch(stallsPerRail.size());
  RailRunner run = [&](int r, const std::function<void(Channel&, Scratch&)>& fn) {
    fn(*channels[r], scratch[r]);
  };
  auto agreeMax = [](std::vector<double>&) {};  // one rank: its own numbers are the agreed ones
  return probeRails(o, AlgoOptions::builtin(), std::vector<bool>(stallsPerRail.size(), true), run,
                    agreeMax);
}

TEST(ProbeLatencyTest, BurstOnOneRailDoesNotMakeItLookSlow) {
  // The burst covers the warm-up and the first third of rail 0's timed rounds; rail 1 is quiet.
  const int burst = 5 + kLatencyProbeRounds / 3;
  ProbeResult p = probeWithStalls({burst, 0});
  EXPECT_LT(p.latency[0], 0.010) << "rail 0 kept a stalled round as its latency";
  EXPECT_LT(p.latency[1], 0.010);
}

TEST(ProbeLatencyTest, ARailStalledInEveryRoundIsSlow) {
  ProbeResult p = probeWithStalls({0, 5 + kLatencyProbeRounds});
  EXPECT_LT(p.latency[0], 0.010);
  EXPECT_GE(p.latency[1], 0.020) << "a rail that is slow every time must measure slow";
}

}  // namespace
}  // namespace nezha
