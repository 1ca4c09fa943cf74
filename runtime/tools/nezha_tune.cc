// nezha-tune: builds tuning tables offline (MCR-DL tuning-table spirit). One process per rank,
// configured by NEZHA_* like any job; rank 0 writes the file.
//
// Data-length table (default): for each size of the sweep it runs the collective hot (split)
// long enough for the online tuner to converge, then times hot against cold (whole operation on
// the lowest-latency rail); the cold threshold is the smallest size from which hot wins at every
// larger size. Jobs load the table with NEZHA_TABLE.
//
// Algorithm table (--algorithms, tune_algorithms.cc): for every collective and size, each
// algorithm it has (and SHARP for allreduce when a sharp rail exists) is timed cold on one rail,
// the fastest wins; then the allreduce cold threshold for this rank count. The rows are for this
// world size only; --merge keeps another file's rows for other rank counts, so runs at several
// N build one table. Jobs load it with NEZHA_ALGO_TABLE.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "bench_args.h"
#include "schedule/table.h"
#include "tune_algorithms.h"

namespace {

const char kUsage[] =
    "usage: nezha-tune [--op allreduce|broadcast|allgather|reduce_scatter|alltoall]\n"
    "                  [--dtype float32|...]\n"
    "                  [--reduce sum|...] [--min-bytes 4K] [--max-bytes 64M] [--factor 2]\n"
    "                  [--warmup 50] [--iters 10] --out TABLE.json [--quiet]\n"
    "       nezha-tune --algorithms [--merge OLD.json] [--min-bytes 1K] [--max-bytes 4M]\n"
    "                  [--factor 2] [--warmup 3] [--iters 10] --out ALGO.json [--quiet]\n"
    "--warmup: hot operations per size before timing (the tuner converges within 50);\n"
    "--iters: timed operations per size and mode. Needs NEZHA_POLICY=adaptive.\n"
    "--algorithms: write the algorithm table (NEZHA_ALGO_TABLE) instead: every collective's\n"
    "algorithms timed per size at this world size; --merge keeps OLD.json's rows for other\n"
    "rank counts.\n";

using nezha::OpKind;
namespace tools = nezha::tools;

int run(int argc, char** argv) {
  // --algorithms and --merge belong to nezha-tune alone: take them out before the shared parser.
  bool algorithms = false;
  std::string merge;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--algorithms") == 0) {
      algorithms = true;
    } else if (std::strcmp(argv[i], "--merge") == 0 && i + 1 < argc) {
      merge = argv[++i];
    } else if (std::strncmp(argv[i], "--merge=", 8) == 0) {
      merge = argv[i] + 8;
    } else if (std::strcmp(argv[i], "--merge") == 0) {
      throw nezha::ConfigError("--merge needs a file");
    } else {
      rest.push_back(argv[i]);
    }
  }
  argc = static_cast<int>(rest.size());
  argv = rest.data();
  tools::BenchArgs a;
  if (algorithms) {
    a.minBytes = 1 << 10;
    a.maxBytes = 4 << 20;
    a.warmup = 3;
    a.iters = 10;
    if (!tools::parseBenchArgs(argc, argv, a, kUsage)) return 0;
    if (a.json.empty()) throw nezha::ConfigError("--out ALGO.json is required");
    nezha::Options opts = nezha::Options::fromEnv();
    if (opts.policy != nezha::Policy::kAdaptive) {
      throw nezha::ConfigError("nezha-tune needs NEZHA_POLICY=adaptive (cold vs hot)");
    }
    nezha::Communicator c(opts);
    return tools::tuneAlgorithms(c, a, merge);
  }
  if (!merge.empty()) throw nezha::ConfigError("--merge goes with --algorithms");
  a.minBytes = 4 << 10;
  a.maxBytes = 64 << 20;
  a.warmup = 50;
  a.iters = 10;
  if (!tools::parseBenchArgs(argc, argv, a, kUsage)) return 0;
  if (a.json.empty()) throw nezha::ConfigError("--out TABLE.json is required");
  nezha::Options opts = nezha::Options::fromEnv();
  if (opts.policy != nezha::Policy::kAdaptive) {
    throw nezha::ConfigError("nezha-tune needs NEZHA_POLICY=adaptive (it tunes split ratios)");
  }
  nezha::Communicator c(opts);
  const int world = c.worldSize();
  const size_t es = nezha::dataTypeSize(a.dtype);
  const size_t never = nezha::kNeverSplitBytes;
  auto sizes = tools::sizeSweep(a.minBytes, a.maxBytes, a.factor);
  std::vector<bool> hotWins;
  if (c.rank() == 0 && !a.quiet) {
    std::printf("%12s %12s %12s %8s  %s\n", "size(B)", "hot(us)", "cold(us)", "winner", "split");
  }
  for (size_t bytesWanted : sizes) {
    size_t count = tools::countFor(a.op, bytesWanted, es, world);
    size_t bytes = tools::bytesFor(a.op, count, es, world);
    size_t inCount = tools::inputCount(a.op, count, world);
    size_t outCount = tools::outputCount(a.op, count, world);
    std::vector<char> in(inCount * es), out(outCount * es);
    tools::fillInput(a.op, a.dtype, a.reduce, c.rank(), 0, in.data(), inCount);

    c.setColdThreshold(0);
    nezha::OpReport report;
    tools::timeOps(c, a.op, a, in, out, count, a.warmup, nullptr);  // lets the table entry converge
    double hot = tools::timeOps(c, a.op, a, in, out, count, a.iters, &report);
    c.setColdThreshold(never);
    double cold = tools::timeOps(c, a.op, a, in, out, count, a.iters, nullptr);
    // A "hot" run whose split left a single rail (slices below NEZHA_MIN_SLICE_BYTES) is a
    // cold run in disguise; only a real split can win.
    hotWins.push_back(report.hot && hot < cold);
    if (c.rank() == 0 && !a.quiet) {
      std::string split;
      for (const auto& [name, r] : report.split) {
        char buf[48];
        std::snprintf(buf, sizeof(buf), "%s%s=%.3f", split.empty() ? "" : ",", name.c_str(), r);
        split += buf;
      }
      std::printf("%12zu %12.1f %12.1f %8s  %s\n", bytes, hot * 1e6, cold * 1e6,
                  hotWins.back() ? "hot" : "cold", split.c_str());
      std::fflush(stdout);
    }
  }
  // Smallest size from which hot wins at every larger size; nothing hot -> never split.
  size_t threshold = never;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (!hotWins[i]) break;
    threshold = tools::bytesFor(a.op, tools::countFor(a.op, sizes[i], es, world), es, world);
  }
  c.setColdThreshold(threshold);
  if (c.rank() == 0) {
    c.saveTable(a.json);
    if (!a.quiet)
      std::printf("# cold threshold %zu bytes; table written to %s\n", threshold, a.json.c_str());
  }
  c.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const nezha::ConfigError& e) {
    std::fprintf(stderr, "nezha-tune: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nezha-tune: %s\n", e.what());
    return 3;
  }
}
