// Command line and environment of gloo-bench. The sweep flags mirror nezha-bench's so that
// bench/run_bench.py drives both tools with one argument list; the rendezvous flags are Gloo's own
// (a FileStore directory shared by every rank instead of Nezha's TCP rendezvous).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rail_split.h"

namespace gloobench {

// Bad flags or environment. The message always names the flag or variable at fault.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };

const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct BenchOptions {
  // Sweep, as nezha-bench. Only allreduce exists here: the baseline the issue compares against.
  std::string op = "allreduce";
  DType dtype = DType::kFloat32;
  uint64_t minBytes = 1024;
  uint64_t maxBytes = 256ull << 20;
  uint64_t factor = 2;
  int warmup = 5;
  int iters = 20;
  bool check = false;
  std::string jsonPath;  // empty: no JSON
  bool quiet = false;

  // Rendezvous and transport (flag, else env GLOO_BENCH_*, else RANK / WORLD_SIZE).
  int rank = -1;
  int worldSize = -1;
  std::string iface;     // --iface as given: one interface (e.g. r0) or a hand-split list
  std::string railName;  // label in the JSON "rails"/"split"; defaults to iface (one rail only)
  // The interfaces and each one's share of every op (--iface r0,r1 --split 0.73,0.27). With one
  // interface: that interface, share 1, and gloo-bench behaves as it always did.
  RailSplit split;
  std::string storeDir;  // FileStore directory visible to every rank
  int timeoutMs = 120000;

  // Loop mode (the chaos scenario): repeat one allreduce of --max-bytes for this many seconds,
  // recording every op's completion time into --trace, instead of the size sweep. 0 = sweep.
  double loopSeconds = 0;
  std::string tracePath;

  // Several interfaces: one Gloo context per rail, each op cut into chunks run concurrently.
  bool HandSplit() const { return split.ifaces.size() > 1; }
};

// Env lookup; injectable so tests and callers need not touch the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnv();

// Parses argv (without argv[0]) and the environment. Throws UsageError. Returns nullopt when
// --help was asked for (usage has been printed).
std::optional<BenchOptions> ParseOptions(const std::vector<std::string>& args,
                                         const EnvLookup& env);

// "4096", "1K", "256M", "1G" (binary multiples). Throws UsageError naming `what`.
uint64_t ParseBytes(const std::string& what, const std::string& text);

// Message sizes of the sweep: minBytes, minBytes*factor, ... up to maxBytes, each rounded down to
// whole elements; sizes below one element are dropped.
std::vector<uint64_t> SweepSizes(const BenchOptions& opts);

const char* Usage();

}  // namespace gloobench
