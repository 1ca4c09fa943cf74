// Both ends of one plugin connection built the way the plugin builds them
// (nccl/pending_link.h: listen() fills the handle, connect() dials it, every rail's connections
// prove the job token), for tests of the plugin's connections over the fake HCA on loopback.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl/engine_link.h"
#include "nccl/handle.h"
#include "nccl/pending_link.h"
#include "test_util.h"

namespace nezha::testing {

using LinkPair = std::array<std::unique_ptr<ncclnet::EngineLink>, 2>;  // [rank]

// The plugin's engine options over rails of these transports on 127.0.0.1, .2, ... Equal shares
// held (no probe, no tuning), so which rails carry a message depends only on a test's cuts.
inline Options heldShareLinkOptions(const std::vector<std::string>& transports) {
  Options o;
  o.rails = loopbackRails(static_cast<int>(transports.size()));
  for (size_t r = 0; r < o.rails.size(); ++r) {
    o.rails[r].transport = transports[r];
    o.rails[r].expectedMbps = 10000;
  }
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  o.probeBytes = 0;
  o.tuneInterval = 1 << 30;
  o.coldThreshold = 64 << 10;
  o.readmitHoldDown = std::chrono::milliseconds(50);
  o.worldSize = 2;
  return o;
}

// Both ends through PendingLink, polled as NCCL polls accept() and connect(); a set-up that
// fails or passes its timeout throws out of take(). `receiver`/`sender`: each end's memory.
inline LinkPair connectPendingLinks(const Options& base, const ncclnet::LinkMemory& receiver = {},
                                    const ncclnet::LinkMemory& sender = {}) {
  constexpr int kS = ncclnet::EngineLink::kSender;
  constexpr int kR = ncclnet::EngineLink::kReceiver;
  const auto timeout = std::chrono::seconds(20);
  ncclnet::ConnectHandle handle;
  auto r = ncclnet::PendingLink::listen(base, timeout, handle, receiver);
  auto s = ncclnet::PendingLink::connect(base, timeout, handle, sender);
  LinkPair links;
  while (links[kR] == nullptr || links[kS] == nullptr) {
    if (links[kR] == nullptr) links[kR] = r->take();
    if (links[kS] == nullptr) links[kS] = s->take();
    std::this_thread::yield();
  }
  return links;
}

}  // namespace nezha::testing
