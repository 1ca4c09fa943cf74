// What a message costs on the plugin's old data path (send_comm/recv_comm: its own striping)
// and on the engine (EngineLink: a header operation and the data operation, each ending with
// an agreed round), in one run, over the same two loopback rails. A measurement, not a check:
// disabled in `make test`; run it with
//   build/runtime/nezha_inprocess_tests --gtest_also_run_disabled_tests
//       --gtest_filter='NcclMessageCost.*'
// It prints one line per size (microseconds per message, old, engine, ratio); docs/nccl.md
// "Cost per message" records a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "nccl/comm_util.h"
#include "nccl/pending_link.h"

namespace nezha::ncclnet {
namespace {

using namespace loopback;  // NOLINT: the old path's loopback helpers
using Seconds = std::chrono::duration<double>;

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;

double oldPathSeconds(Pair& p, std::vector<uint8_t>& out, std::vector<uint8_t>& in, int n) {
  const auto start = Clock::now();
  for (int m = 0; m < n; ++m) {
    void* dst = in.data();
    const uint64_t size = in.size();
    int tag = m;
    RecvRequest* rr = p.recv->irecv(1, &dst, &size, &tag);
    SendRequest* sr = nullptr;
    int sizes[1];
    bool rdone = false;
    while (sr == nullptr) {
      sr = p.send->isend(out.data(), out.size(), m);
      if (!rdone) rdone = p.recv->test(rr, sizes);
    }
    uint64_t sent = 0;
    bool sdone = false;
    while (!sdone || !rdone) {
      if (!sdone) sdone = p.send->test(sr, &sent);
      if (!rdone) rdone = p.recv->test(rr, sizes);
    }
  }
  return Seconds(Clock::now() - start).count();
}

double engineSeconds(std::array<std::unique_ptr<EngineLink>, 2>& links, std::vector<uint8_t>& out,
                     std::vector<uint8_t>& in, int n) {
  const auto start = Clock::now();
  for (int m = 0; m < n; ++m) {
    const uint64_t sid = links[kS]->post(out.data(), out.size());
    const uint64_t rid = links[kR]->post(in.data(), in.size());
    uint64_t bytes = 0;
    while (!links[kS]->test(sid, &bytes)) std::this_thread::yield();
    while (!links[kR]->test(rid, &bytes)) std::this_thread::yield();
  }
  return Seconds(Clock::now() - start).count();
}

TEST(NcclMessageCost, DISABLED_OldPathVersusEngine) {
  PluginConfig config = loopbackConfig(2);
  config.chunkBytes = 128 * 1024;  // the old path's default
  PluginContext ctx(config, nullptr);
  ListenComm listen(ctx);
  Pair old = connectPair(ctx, listen);
  waitAllRailsCarry(ctx, old);

  Options o;
  o.rails = nezha::testing::loopbackRails(2);
  o.jobToken = nezha::testing::kTestToken;
  ConnectHandle handle;
  auto listening = PendingLink::listen(o, std::chrono::milliseconds(20000), handle);
  auto connecting = PendingLink::connect(o, std::chrono::milliseconds(20000), handle);
  std::array<std::unique_ptr<EngineLink>, 2> links;
  while (!links[kS] || !links[kR]) {
    if (!links[kR]) links[kR] = listening->take();
    if (!links[kS]) links[kS] = connecting->take();
    std::this_thread::yield();
  }
  std::printf("%10s %8s %12s %12s %8s\n", "bytes", "messages", "old us/msg", "engine us/msg",
              "ratio");
  const std::pair<size_t, int> sizes[] = {
      {4 << 10, 400}, {64 << 10, 200}, {1 << 20, 40}, {16 << 20, 8}};
  for (const auto& [bytes, n] : sizes) {
    std::vector<uint8_t> out(bytes, 7), in(bytes, 0);
    oldPathSeconds(old, out, in, 2);  // warm both paths at this size
    engineSeconds(links, out, in, 2);
    // The least of five alternating runs: the dev machine is shared, and load only adds time.
    double before = 1e300, after = 1e300;
    for (int rep = 0; rep < 5; ++rep) {
      before = std::min(before, oldPathSeconds(old, out, in, n) / n * 1e6);
      after = std::min(after, engineSeconds(links, out, in, n) / n * 1e6);
    }
    std::printf("%10zu %8d %12.1f %12.1f %8.2f\n", bytes, n, before, after, after / before);
    EXPECT_EQ(in, out);
  }
}

}  // namespace
}  // namespace nezha::ncclnet
