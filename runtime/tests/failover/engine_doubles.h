// Test doubles for driving the failover engine without sockets (failover/failover_engine.h):
//   ScriptedRail      a one-rank Transport whose exchanges succeed until the test breaks it,
//                     at once or at its Nth exchange (a rail failing mid-slice);
//   LoopbackAgreement the Agreement of a one-rank job: a round's max is this rank's own vector.
// With them a single rank exercises the engine's own logic (rounds, replay, retire, records,
// re-admission, drain) deterministically; the multi-rank paths over real sockets are covered by
// striped_stream_test.cc, the communicator's failover tests and the test bed.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "base/error.h"
#include "failover/agreement.h"
#include "transport/transport.h"

namespace nezha::testing {

class ScriptedRail : public Transport {
 public:
  explicit ScriptedRail(int rail, std::string name = "") : rail_(rail), name_(std::move(name)) {}

  // The rail breaks at its `n`th exchange from now (1 = the next one) and stays broken.
  void breakAtExchange(int n) { breakAt_ = exchanges_.load() + n; }
  void breakNow() { broken_ = true; }
  // connect() fails (a rebuild that cannot reach its peer).
  void failConnect() { connectFails_ = true; }
  int exchanges() const { return exchanges_.load(); }

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int railIndex() const override { return rail_; }
  const std::string& name() const override { return name_; }
  void exchange(std::vector<IoOp>&) override {
    const int n = ++exchanges_;
    if (breakAt_ > 0 && n >= breakAt_) broken_ = true;
    if (broken_ || aborted_) throw RailError(rail_, strCat("scripted rail ", rail_, " broke"));
  }
  void abort() override { aborted_ = true; }
  void setProgressTimeout(std::chrono::milliseconds) override {}
  void setPeersStillComing(std::function<bool()>) override {}
  void setProgressWatch(ProgressWatch) override {}

  RailEndpoint endpoint() const override { return RailEndpoint{name_, "tcp", "", 1, true}; }
  void connect(const JobTable&, Deadline) override {
    if (connectFails_) throw RailError(rail_, "scripted rail: peer unreachable");
  }
  std::vector<Fd> releaseControl() override { return {}; }
  uint64_t rejectedConnections() const override { return 0; }

 private:
  int rail_;
  std::string name_;
  std::atomic<int> exchanges_{0};
  std::atomic<int> breakAt_{0};
  std::atomic<bool> broken_{false}, aborted_{false};
  bool connectFails_ = false;
};

class LoopbackAgreement : public Agreement {
 public:
  void maxReduce(std::vector<double>&, std::chrono::milliseconds) override { ++rounds; }
  void notifyRailDown(int rail, uint64_t) override { notices.push_back(rail); }
  void setCurrentOp(uint64_t op) override { currentOp = op; }
  bool peersBehind(uint64_t) override { return false; }
  std::chrono::milliseconds peerSilence() const override { return {}; }
  std::vector<int> silentPeers() const override { return {}; }
  void attach(int rail, std::vector<Fd>) override { attached.push_back(rail); }
  void closeAll() override { closed = true; }

  int rounds = 0;
  uint64_t currentOp = 0;
  std::vector<int> notices, attached;
  bool closed = false;
};

}  // namespace nezha::testing
