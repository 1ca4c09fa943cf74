#include "schedule/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace nezha {

namespace {
// Untimed rounds per rail first: the first messages on fresh connections (and ranks still
// arriving from setup) would otherwise count as latency.
constexpr int kLatencyWarmupRounds = 5;
constexpr int kBandwidthRounds = 2;

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

double timeTinyAllreduce(Channel& ch, Scratch& scratch) {
  double tiny = 0;
  const auto t = std::chrono::steady_clock::now();
  allreduceRecursiveDoubling(ch, reinterpret_cast<char*>(&tiny), 1, DataType::kFloat64,
                             ReduceOp::kMax, scratch);
  return secondsSince(t);
}

ProbeResult probeRails(const Options& o, const AlgoOptions& algo, const std::vector<bool>& usable,
                       const RailRunner& run,
                       const std::function<void(std::vector<double>&)>& agreeMax) {
  const size_t n = o.rails.size();
  ProbeResult result;
  result.latency.assign(n, 0.0);
  result.bandwidth.assign(n, 1.0);
  if (o.worldSize == 1 || o.probeBytes == 0) return result;
  std::vector<double> times(2 * n, 0.0);  // [latency..., bulk time...]
  std::vector<char> bulk(o.probeBytes / 4 * 4 + 4, 1);
  const size_t floats = o.probeBytes / 4 > 0 ? o.probeBytes / 4 : 1;
  for (size_t r = 0; r < n; ++r) {
    if (!usable[r]) continue;
    run(static_cast<int>(r), [&](Channel& ch, Scratch& scratch) {
      for (int i = 0; i < kLatencyWarmupRounds; ++i) timeTinyAllreduce(ch, scratch);
    });
  }
  // Latency: rounds interleaved across the rails, the minimum kept. On a shared host the noise
  // (a rank descheduled, a peer late) only ever adds time and comes in bursts: rails probed one
  // after the other let a burst land on one rail only, and a median of a few rounds still took
  // it (the bench saw 52 us against 15 us for equal rails, and every small operation went to the
  // slower one). The minimum over rounds spread across the whole probe is each rail's floor.
  for (size_t r = 0; r < n; ++r) times[r] = usable[r] ? 1e30 : 0.0;
  for (int i = 0; i < kLatencyProbeRounds; ++i) {
    for (size_t r = 0; r < n; ++r) {
      if (!usable[r]) continue;
      run(static_cast<int>(r), [&](Channel& ch, Scratch& scratch) {
        times[r] = std::min(times[r], timeTinyAllreduce(ch, scratch));
      });
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (!usable[r]) continue;
    run(static_cast<int>(r), [&](Channel& ch, Scratch& scratch) {
      double best = 1e30;
      for (int i = 0; i < kBandwidthRounds; ++i) {
        auto t = std::chrono::steady_clock::now();
        allreduce(ch, bulk.data(), floats, DataType::kFloat32, ReduceOp::kMax, scratch, algo);
        best = std::min(best, secondsSince(t));
      }
      times[n + r] = best;
    });
  }
  agreeMax(times);
  double latencySum = 0, bandwidthSum = 0;
  size_t probed = 0;
  for (size_t r = 0; r < n; ++r) {
    if (!usable[r]) continue;
    result.latency[r] = times[r];
    double transfer = std::max(times[n + r] - times[r], 1e-7);
    result.bandwidth[r] = static_cast<double>(floats * 4) / transfer;
    latencySum += result.latency[r];
    bandwidthSum += result.bandwidth[r];
    ++probed;
  }
  for (size_t r = 0; r < n && probed > 0; ++r) {
    if (usable[r]) continue;
    result.latency[r] = latencySum / probed;
    result.bandwidth[r] = bandwidthSum / probed;
  }
  if (o.verbose && o.rank == 0) {
    for (size_t r = 0; r < n; ++r) {
      std::fprintf(stderr, "nezha: probe rail %s: latency %.1f us, allreduce bw %.1f MB/s\n",
                   o.rails[r].name.c_str(), result.latency[r] * 1e6, result.bandwidth[r] / 1e6);
    }
  }
  return result;
}

}  // namespace nezha
