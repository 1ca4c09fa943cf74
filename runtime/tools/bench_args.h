// Command line and data helpers shared by nezha-bench and nezha-tune.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nezha/nezha.hpp"

namespace nezha::tools {

struct BenchArgs {
  OpKind op = OpKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  size_t minBytes = 1 << 10;
  size_t maxBytes = 256 << 20;
  double factor = 2;
  int warmup = 5;
  int iters = 20;
  int root = 0;
  bool check = false;
  bool quiet = false;
  std::string json;        // nezha-bench: results file; nezha-tune: table output
  double loopSeconds = 0;  // nezha-bench loop mode: > 0 = loop on --max-bytes this long
  std::string trace;       // loop mode: per-op trace file (rank 0)
  // Loop mode, rank 0: created once the loop is running (kLoopReadyOps done), so a harness can
  // start a fault on a job known to be moving data instead of sleeping and hoping it is.
  std::string readyFile;
  // nezha-bench --op alltoall: also time the allgather-composed alltoall (the path before
  // alltoall had its own data path) at every size, in the same run (alltoall_composed.h).
  bool vsComposed = false;
  // nezha-bench: also run every size under this policy on a second communicator, interleaved
  // with the first (empty: off).
  std::string pairedPolicy;
};

// Parses the whole command line (argv[0] is the program) with getopt_long, so --flag=value and
// --flag value both work. Throws ConfigError naming the flag on bad input; returns false if
// --help was given (usage printed on stdout).
bool parseBenchArgs(int argc, char** argv, BenchArgs& args, const char* usage);

// Sizes min, min*factor, ... <= max.
std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, double factor);

// Elements per rank buffer for an operation of `bytes` total (per nccl-tests: allgather counts
// the gathered output, reduce_scatter the full input).
// allgather and alltoall count per block (the size is the whole buffer of world blocks).
size_t countFor(OpKind op, size_t bytes, size_t elemSize, int world);
// Elements of a rank's send / receive buffer for an operation of `count` (per countFor).
size_t inputCount(OpKind op, size_t count, int world);
size_t outputCount(OpKind op, size_t count, int world);
size_t bytesFor(OpKind op, size_t count, size_t elemSize, int world);
double busBandwidthFactor(OpKind op, int world);

// Deterministic small-integer inputs so results are exact in every dtype; fills the send buffer
// of `rank` and checks the output. Returns the number of wrong elements.
void fillInput(OpKind op, DataType t, ReduceOp red, int rank, int root, void* buf, size_t n);
size_t checkOutput(OpKind op, DataType t, ReduceOp red, int rank, int world, int root,
                   const void* out, size_t count);

}  // namespace nezha::tools
