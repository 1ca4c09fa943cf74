// nezha-bench loop mode (the bench/ chaos harness's contract, bench/README.md): allreduce of
// --max-bytes in a loop for --loop-seconds, every result checked, per-op trace on rank 0.
#pragma once

#include "bench_args.h"

namespace nezha::tools {

// Returns the exit code: 0 ok, 1 a wrong result, 3 an operation failed (trace still written).
int runLoop(Communicator& c, const BenchArgs& a);

}  // namespace nezha::tools
