// What gloo-bench reports: an nccl-tests-style table on stdout and the JSON document that
// nezha-bench also writes, so the harness merges both without caring which tool ran.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bench_options.h"

namespace gloobench {

struct SizeResult {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double timeUs = 0;                // mean wall time per op on rank 0, after warmup
  double algbwGBps = 0;             // bytes / time, 1e9 bytes per second
  double busbwGBps = 0;             // algbw * 2(n-1)/n (nccl-tests' allreduce factor)
  std::string check;                // ok | failed | skipped
  std::vector<uint64_t> railBytes;  // bytes of each op on each rail (opts.split order)
};

// Label of each rail in the table and JSON: --rail-name (or the interface) with one rail, the
// interface names with a hand split.
std::vector<std::string> RailNames(const BenchOptions& opts);

// Bus bandwidth factor of allreduce for n ranks.
double AllreduceBusFactor(int worldSize);

void PrintTableHeader(std::ostream& out, const BenchOptions& opts);
void PrintTableRow(std::ostream& out, const SizeResult& r);

// The whole JSON document as a string (no dependency on a JSON library).
std::string RenderJson(const BenchOptions& opts, const std::vector<SizeResult>& results);

// Writes atomically (temp file + rename) so a reader never sees half a document.
void WriteJsonFile(const std::string& path, const std::string& doc);

}  // namespace gloobench
