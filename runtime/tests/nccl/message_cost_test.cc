// What a message costs on the plugin's data path (EngineLink: the head operation, carrying
// the size in the engine's operation header and, up to NEZHA_ROUND_FREE_BYTES, the data, round-
// free; above that the data operation over the rails, with its round) next to one plain
// loopback TCP socket moving the same bytes (the floor: no striping, no failover), in one run.
// A measurement, not a check: disabled in `make test`; run it with
//   build/runtime/nezha_inprocess_tests --gtest_also_run_disabled_tests
//       --gtest_filter='NcclMessageCost.*'
// It prints one line per size (microseconds per message, socket, engine, ratio); docs/nccl.md
// "Cost per message" records runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "nccl/pending_link.h"
#include "test_util.h"

namespace nezha::ncclnet {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kS = EngineLink::kSender;
constexpr int kR = EngineLink::kReceiver;

// One connected loopback TCP socket pair.
struct SocketPair {
  Fd sender, receiver;
};

SocketPair connectSockets() {
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  Fd listener = listenOn("127.0.0.1", 0, "");
  SocketPair p;
  p.sender = connectTo("127.0.0.1", localPort(listener.get()), "", "", deadline, 0, "cost");
  p.receiver = acceptUntil(listener.get(), deadline, 0, "cost");
  return p;
}

// Message by message, like the engine loop below: the receiver reads the whole message and
// answers one byte, and only then does the sender start the next one.
double socketSeconds(SocketPair& p, std::vector<uint8_t>& out, std::vector<uint8_t>& in, int n) {
  const Deadline deadline = Clock::now() + std::chrono::seconds(60);
  std::thread sender([&] {
    uint8_t go = 0;
    for (int m = 0; m < n; ++m) {
      sendAll(p.sender.get(), out.data(), out.size(), deadline, 0);
      recvAll(p.sender.get(), &go, 1, deadline, 0);
    }
  });
  const auto start = Clock::now();
  const uint8_t go = 1;
  for (int m = 0; m < n; ++m) {
    recvAll(p.receiver.get(), in.data(), in.size(), deadline, 0);
    sendAll(p.receiver.get(), &go, 1, deadline, 0);
  }
  const double secs = Seconds(Clock::now() - start).count();
  sender.join();
  return secs;
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

TEST(NcclMessageCost, DISABLED_SocketVersusEngine) {
  SocketPair sockets = connectSockets();
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
  std::printf("%10s %8s %12s %12s %8s\n", "bytes", "messages", "socket us/msg", "engine us/msg",
              "ratio");
  const std::pair<size_t, int> sizes[] = {
      {4 << 10, 400}, {64 << 10, 200}, {1 << 20, 40}, {16 << 20, 8}};
  for (const auto& [bytes, n] : sizes) {
    std::vector<uint8_t> out(bytes, 7), in(bytes, 0);
    socketSeconds(sockets, out, in, 2);  // warm both paths at this size
    engineSeconds(links, out, in, 2);
    // The least of five alternating runs: the dev machine is shared, and load only adds time.
    double floor = 1e300, engine = 1e300;
    for (int rep = 0; rep < 5; ++rep) {
      floor = std::min(floor, socketSeconds(sockets, out, in, n) / n * 1e6);
      engine = std::min(engine, engineSeconds(links, out, in, n) / n * 1e6);
    }
    std::printf("%10zu %8d %12.1f %12.1f %8.2f\n", bytes, n, floor, engine, engine / floor);
    EXPECT_EQ(in, out);
  }
}

}  // namespace
}  // namespace nezha::ncclnet
