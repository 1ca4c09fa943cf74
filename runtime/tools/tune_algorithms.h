// nezha-tune --algorithms: measures every collective's algorithms per size at this world size
// and writes the algorithm table (schedule/algo_table.h).
#pragma once

#include <string>
#include <vector>

#include "bench_args.h"

namespace nezha::tools {

// Mean seconds per operation of `op` over `iters` runs, max over ranks (every rank must decide
// the same); `report`, if given, gets this rank's last operation's split.
double timeOps(Communicator& c, OpKind op, const BenchArgs& a, std::vector<char>& in,
               std::vector<char>& out, size_t count, int iters, OpReport* report = nullptr);

// Runs the sweep on every rank (all ranks call it alike); rank 0 writes a.json, merged with the
// rows of `merge` (if not empty) for other rank counts. Returns the process exit code.
int tuneAlgorithms(Communicator& c, const BenchArgs& a, const std::string& merge);

}  // namespace nezha::tools
