// Helpers for in-process multi-rank tests: ranks are threads, rails are loopback addresses
// 127.0.0.(1+i) on `lo`, the rendezvous server is started first to learn its port.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nezha/nezha.hpp"

namespace nezha::testing {

// 32 random bytes, hex-encoded: the shape of a real job token (shorter ones are refused).
inline constexpr char kTestToken[] =
    "9f2c1e7a4b6d8f0312a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9";

inline std::vector<RailSpec> loopbackRails(int n) {
  std::vector<RailSpec> rails;
  for (int i = 0; i < n; ++i) {
    rails.push_back({"r" + std::to_string(i), "lo", "tcp", "127.0.0." + std::to_string(i + 1)});
  }
  return rails;
}

// Options for every rank of an in-process job; `tweak` edits the shared template first.
inline std::vector<Options> jobOptions(int ranks, int rails,
                                       const std::function<void(Options&)>& tweak = nullptr) {
  Options base;
  base.worldSize = ranks;
  base.rails = loopbackRails(rails);
  base.jobToken = kTestToken;
  base.rendezvousHost = "localhost";  // exercises name resolution
  base.rendezvousPort = 0;
  base.rendezvousTimeout = std::chrono::milliseconds(20000);
  base.ioTimeout = std::chrono::milliseconds(20000);
  base.probeBytes = 64 << 10;
  base.streamsPerPeer = 2;
  if (tweak) tweak(base);
  std::vector<Options> out(ranks, base);
  for (int r = 0; r < ranks; ++r) out[r].rank = r;
  if (ranks > 1) {
    out[0].server = startRendezvousServer(out[0]);
    for (auto& o : out) o.rendezvousPort = rendezvousServerPort(*out[0].server);
  }
  return out;
}

// Runs fn(rank) on one thread per rank; rethrows the first exception after all joined.
inline void runRanks(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Builds one Communicator per rank concurrently (construction blocks until all joined).
inline std::vector<std::unique_ptr<Communicator>> makeJob(const std::vector<Options>& opts) {
  std::vector<std::unique_ptr<Communicator>> comms(opts.size());
  runRanks(static_cast<int>(opts.size()),
           [&](int r) { comms[r] = std::make_unique<Communicator>(opts[r]); });
  return comms;
}

}  // namespace nezha::testing
