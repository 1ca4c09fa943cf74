// Short per-rail probe at init: latency of a tiny allreduce (the minimum over rounds interleaved
// across the rails) and time of a probeBytes allreduce, each rail alone, then max-reduced over
// ranks so every rank derives the same cold rail, static split and automatic threshold.
// Rails not usable at start are not probed; they get the mean of the probed rails (a neutral
// first guess the tuner corrects once they join).
#pragma once

#include <functional>

#include "collectives/collectives.h"
#include "schedule/scheduler.h"

namespace nezha {

// Timed rounds per rail of the latency probe (re-admission's probe uses as many).
inline constexpr int kLatencyProbeRounds = 15;

// Seconds of one tiny allreduce (one double, max) on ch: one round of a latency probe.
double timeTinyAllreduce(Channel& ch, Scratch& scratch);

// Runs fn on rail `rail`'s thread and waits for it.
using RailRunner = std::function<void(int rail, const std::function<void(Channel&, Scratch&)>& fn)>;

ProbeResult probeRails(const Options& o, const AlgoOptions& algo, const std::vector<bool>& usable,
                       const RailRunner& run,
                       const std::function<void(std::vector<double>&)>& agreeMax);

}  // namespace nezha
