// The timed size sweep: for each message size, warmup ops, then `iters` timed ring allreduces
// (out of place, so the input stays known and --check can verify the last result exactly).
// With a hand split each op is cut into one chunk per rail, all chunks reduced at once, each on
// its rail's context; the op ends when the last chunk does.
#pragma once

#include <gloo/context.h>

#include <functional>
#include <memory>
#include <vector>

#include "bench_options.h"
#include "bench_report.h"

namespace gloobench {

// Called on every rank after each size (rank 0 prints it).
using RowCallback = std::function<void(const SizeResult&)>;

// rails: one connected context per interface of opts.split (ConnectRails), same order.
// Throws gloo::Exception when the transport fails (a cut rail shows up as a timeout or a closed
// connection after opts.timeoutMs).
std::vector<SizeResult> RunSweep(const std::vector<std::shared_ptr<gloo::Context>>& rails,
                                 const BenchOptions& opts, const RowCallback& onRow);

}  // namespace gloobench
