// The load balancer's arithmetic (pure functions, unit-tested without a network).
#pragma once

#include <cstddef>
#include <vector>

namespace nezha {

// Online update from agreed per-rail timings of one table entry. A rail's effective rate is
// bytes/seconds; the target split gives each rail a share proportional to its rate, which is
// exactly the split where all rails finish together (the fixed point equalizes times even with
// per-rail startup latency). The step moves `gain` of the way there. Rails that carried no
// bytes keep their ratio. Result sums to 1.
std::vector<double> tuneRatios(const std::vector<double>& current, const std::vector<double>& bytes,
                               const std::vector<double>& seconds, double gain);

// Bandwidth-proportional split (MRIB style, the static policy and the hot-start seed).
std::vector<double> ratiosFromBandwidth(const std::vector<double>& bandwidth);

// Cold/hot threshold from probed per-rail latency (s) and bandwidth (bytes/s): the smallest
// power of two S where splitting, max_i(lat_i) + S/sum(bw), beats the best single rail,
// min_i(lat_i + S/bw_i). Clamped to [minBytes, maxBytes].
size_t autoColdThreshold(const std::vector<double>& latency, const std::vector<double>& bandwidth,
                         size_t minBytes = 16 << 10, size_t maxBytes = size_t(1) << 30);

// Index of the lowest-latency rail (cold rail) / highest-bandwidth rail; ties -> lowest index.
int lowestLatencyRail(const std::vector<double>& latency);
int highestBandwidthRail(const std::vector<double>& bandwidth);

}  // namespace nezha
