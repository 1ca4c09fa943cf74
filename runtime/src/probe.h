// Short per-rail probe at init: latency of a tiny allreduce and time of a probeBytes allreduce,
// each rail alone, then max-reduced over ranks on rail 0 so every rank derives the same cold
// rail, static split and automatic threshold.
#pragma once

#include <functional>

#include "algorithms/algorithms.h"
#include "scheduler.h"

namespace nezha {

// Runs fn on rail `rail`'s thread and waits for it.
using RailRunner = std::function<void(int rail, const std::function<void(Channel&, Scratch&)>& fn)>;

ProbeResult probeRails(const Options& o, const AlgoOptions& algo, const RailRunner& run);

// Max-reduces `values` across ranks on `rail` (used for agreement).
void agreeMax(std::vector<double>& values, int rail, const AlgoOptions& algo,
              const RailRunner& run);

}  // namespace nezha
