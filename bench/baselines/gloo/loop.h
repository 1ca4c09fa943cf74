// Loop mode for the chaos scenario: the same allreduce again and again for a fixed time while the
// harness cuts and restores a rail, with every op's wall-clock completion time recorded so stalls
// and recovery can be read off the trace. A Gloo failure (timeout, closed connection) ends the
// loop and is recorded with its time: Gloo's context is dead after it.
#pragma once

#include <gloo/context.h>

#include <memory>

#include "bench_options.h"

namespace gloobench {

// Runs until opts.loopSeconds have passed or an op fails; rank 0 writes opts.tracePath.
// Returns the process exit code (0 = every op completed).
int RunLoop(const std::shared_ptr<gloo::Context>& context, const BenchOptions& opts);

}  // namespace gloobench
