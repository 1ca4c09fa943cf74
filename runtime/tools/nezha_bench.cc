// nezha-bench: nccl-tests-style sweep of one collective, one process per rank, configured by
// the NEZHA_* environment. Rank 0 prints the table and (with --json) writes the results file
// whose format the bench/ harness depends on (see runtime/README.md).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "alltoall_composed.h"
#include "base/json.h"
#include "bench_args.h"
#include "bench_loop.h"

namespace {

const char kUsage[] =
    "usage: nezha-bench [--op allreduce|broadcast|allgather|reduce_scatter|alltoall]\n"
    "                   [--dtype float32|...]\n"
    "                   [--reduce sum|prod|min|max] [--min-bytes 1K] [--max-bytes 256M]\n"
    "                   [--factor 2] [--warmup 5] [--iters 20] [--root 0] [--check]\n"
    "                   [--json FILE] [--quiet] [--loop-seconds S --trace FILE\n"
    "                   [--ready-file FILE]] [--paired-policy POLICY]\n"
    "--paired-policy adaptive|static|single: also run every size on a second communicator\n"
    "  under that policy (rendezvous port + 1), in alternate blocks of 5 timed operations, and\n"
    "  report both (paired(us), time/paired): a side-by-side comparison in one launch.\n"
    "--vs-composed (alltoall): also time the allgather-composed alltoall every size, side by\n"
    "  side (composed(us), speedup = composed time / alltoall time).\n"
    "--loop-seconds: allreduce of --max-bytes in a loop for S seconds, every result checked;\n"
    "  rank 0 writes a per-op trace (times, split, failovers) to --trace, and creates\n"
    "  --ready-file once the first 20 operations are done (fault injection starts on it).\n"
    "One process per rank; configure with NEZHA_RAILS, NEZHA_RANK, NEZHA_WORLD_SIZE,\n"
    "NEZHA_RENDEZVOUS, NEZHA_JOB_TOKEN, NEZHA_POLICY (see runtime/README.md).\n"
    "Exit codes: 0 ok, 1 --check found wrong results, 2 bad arguments/config, 3 runtime error.\n";

using nezha::dumpJson;
using nezha::Json;
using nezha::OpKind;
namespace tools = nezha::tools;

// Per-operation times of one size. The mean is what a training loop pays; the trimmed mean
// leaves out the slowest kTrimmedShare of operations: on the 2-core test bed one 2 ms pause of
// the machine moves a 200-operation mean of 150 us operations by 7 %, on whichever side of a
// paired comparison it lands. Anything a policy does more often than 1 operation in 50 (a round
// every 16th, an agreement every 5th) stays in it. The quantiles show where the mean came from.
constexpr double kTrimmedShare = 0.02;
struct OpTimes {
  double mean = 0, trimmed = 0, p50 = 0, p99 = 0, max = 0;
};

struct Row {
  size_t bytes, count;
  double timeUs, algbw, busbw;
  OpTimes ops;            // each timed operation on its own, on this rank
  double composedUs = 0;  // --vs-composed: the allgather-composed alltoall, same size
  // --paired-policy: the same size on the second communicator, timed in alternate blocks.
  bool paired = false;
  OpTimes pairedOps;
  nezha::OpReport pairedReport;
  nezha::OpReport report;
  std::string check;
};

// Nearest-rank quantile of an ascending, non-empty vector.
double quantileOfSorted(const std::vector<double>& v, double q) {
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Summarizes per-operation times (sorts them).
OpTimes summarize(std::vector<double>& us) {
  OpTimes t;
  std::sort(us.begin(), us.end());
  const size_t kept =
      us.size() - static_cast<size_t>(kTrimmedShare * static_cast<double>(us.size()));
  for (size_t i = 0; i < us.size(); ++i) {
    t.mean += us[i];
    if (i < kept) t.trimmed += us[i];
  }
  t.mean /= static_cast<double>(us.size());
  t.trimmed /= static_cast<double>(kept);
  t.p50 = quantileOfSorted(us, 0.5);
  t.p99 = quantileOfSorted(us, 0.99);
  t.max = us.back();
  return t;
}

// --paired-policy: operations per block. Small enough that both communicators see the same
// moments of a noisy machine, large enough that switching between them is a small share.
constexpr int kPairBlock = 5;

void runOp(nezha::Communicator& c, const tools::BenchArgs& a, const void* in, void* out,
           void* inout, size_t count) {
  switch (a.op) {
    case OpKind::kAllreduce:
      return c.allreduce(in, out, count, a.dtype, a.reduce);
    case OpKind::kBroadcast:
      return c.broadcast(inout, count, a.dtype, a.root);
    case OpKind::kAllgather:
      return c.allgather(in, out, count, a.dtype);
    case OpKind::kReduceScatter:
      return c.reduceScatter(in, out, count, a.dtype, a.reduce);
    case OpKind::kAlltoall:
      return c.alltoall(in, out, count, a.dtype);
    case OpKind::kBarrier:
      return c.barrier();
  }
}

std::string splitText(const nezha::OpReport& r) {
  std::string s;
  for (const auto& [name, ratio] : r.split) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%s=%.2f", s.empty() ? "" : ",", name.c_str(), ratio);
    s += buf;
  }
  return s;
}

void printHeader(nezha::Communicator& c, const tools::BenchArgs& a) {
  std::printf("# nezha-bench %s dtype %s reduce %s: %d ranks, policy %s, rails",
              nezha::toString(a.op), nezha::toString(a.dtype), nezha::toString(a.reduce),
              c.worldSize(), nezha::toString(c.options().policy));
  for (const auto& r : c.rails()) {
    std::printf(" %s=%s(%s,%.0fMB/s)", r.name.c_str(), r.iface.c_str(), r.transport.c_str(),
                r.bandwidthBytesPerSecond / 1e6);
  }
  std::printf(", cold threshold %zu\n", c.coldThreshold());
  std::printf("%12s %12s %8s %7s %12s %11s %11s  %-24s %s", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "split", "check");
  if (a.vsComposed) std::printf("  %14s %8s", "composed(us)", "speedup");
  if (!a.pairedPolicy.empty()) std::printf("  %12s %8s", "paired(us)", "time/paired");
  std::printf("\n");
  std::fflush(stdout);
}

// Warmup, then --iters timed out-of-place operations of one size; with --check every rank
// verifies the last result and learns whether any rank saw a wrong one. With a paired
// communicator (--paired-policy) both warm up, then run --iters each in alternate blocks of
// kPairBlock operations (ABBA order): a launch that the machine slows as a whole (the test
// bed's ranks share two cores) slows both policies alike, so their ratio is side by side.
Row measureSize(nezha::Communicator& c, nezha::Communicator* paired, const tools::BenchArgs& a,
                size_t sizeBytes) {
  const int rank = c.rank(), world = c.worldSize();
  const size_t es = nezha::dataTypeSize(a.dtype);
  const size_t count = tools::countFor(a.op, sizeBytes, es, world);
  const size_t inCount = tools::inputCount(a.op, count, world);
  const size_t outCount = tools::outputCount(a.op, count, world);
  std::vector<char> in(inCount * es), out(outCount * es), inout(count * es);
  tools::fillInput(a.op, a.dtype, a.reduce, rank, a.root,
                   a.op == OpKind::kBroadcast ? inout.data() : in.data(),
                   a.op == OpKind::kBroadcast ? count : inCount);
  auto timeOps = [&](nezha::Communicator& on, int n, std::vector<double>& us) {
    auto last = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      runOp(on, a, in.data(), out.data(), inout.data(), count);
      const auto now = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(now - last).count());
      last = now;
    }
  };
  for (int i = 0; i < a.warmup; ++i) runOp(c, a, in.data(), out.data(), inout.data(), count);
  if (paired) {
    for (int i = 0; i < a.warmup; ++i) {
      runOp(*paired, a, in.data(), out.data(), inout.data(), count);
    }
    paired->barrier();
  }
  c.barrier();
  std::vector<double> opUs, pairedUs;
  if (paired == nullptr) {
    timeOps(c, a.iters, opUs);
  } else {
    for (int done = 0, block = 0; done < a.iters; done += kPairBlock, ++block) {
      const int n = std::min(kPairBlock, a.iters - done);
      const bool primaryFirst = block % 4 == 0 || block % 4 == 3;
      timeOps(primaryFirst ? c : *paired, n, primaryFirst ? opUs : pairedUs);
      timeOps(primaryFirst ? *paired : c, n, primaryFirst ? pairedUs : opUs);
    }
  }
  Row row;
  row.ops = summarize(opUs);
  const double secs = row.ops.mean * 1e-6 * a.iters;
  if (paired) {
    row.paired = true;
    row.pairedOps = summarize(pairedUs);
    row.pairedReport = paired->lastReport();
  }
  row.report = c.lastReport();
  if (a.vsComposed) {
    // The same size through the old path, right after the new one (same run, same rails).
    std::vector<size_t> counts(static_cast<size_t>(world), count), displs;
    for (int p = 0; p < world; ++p) displs.push_back(static_cast<size_t>(p) * count);
    auto composed = [&] {
      tools::composedAlltoallv(c, in.data(), counts.data(), displs.data(), out.data(),
                               counts.data(), displs.data(), a.dtype);
    };
    for (int i = 0; i < a.warmup; ++i) composed();
    c.barrier();
    auto c0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) composed();
    row.composedUs = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() /
                     a.iters * 1e6;
    // The new path's result is what --check looks at.
    runOp(c, a, in.data(), out.data(), inout.data(), count);
  }
  row.bytes = tools::bytesFor(a.op, count, es, world);
  row.count = count;
  row.timeUs = secs / a.iters * 1e6;
  row.algbw = static_cast<double>(row.bytes) / (secs / a.iters) / 1e9;
  row.busbw = row.algbw * tools::busBandwidthFactor(a.op, world);
  row.check = "skipped";
  if (a.check) {
    const void* result = a.op == OpKind::kBroadcast ? inout.data() : out.data();
    auto wrongElements = [&] {
      return static_cast<int64_t>(
          tools::checkOutput(a.op, a.dtype, a.reduce, rank, world, a.root, result, count));
    };
    int64_t bad = 0;
    if (paired) {  // one more operation on each communicator, each result checked
      runOp(*paired, a, in.data(), out.data(), inout.data(), count);
      bad += wrongElements();
      runOp(c, a, in.data(), out.data(), inout.data(), count);
    }
    bad += wrongElements();
    if (bad > 0) {
      std::fprintf(stderr, "nezha-bench: rank %d: %lld wrong elements at %zu bytes\n", rank,
                   static_cast<long long>(bad), row.bytes);
    }
    c.allreduce(&bad, &bad, 1, nezha::DataType::kInt64, nezha::ReduceOp::kMax);
    row.check = bad > 0 ? "failed" : "ok";
  }
  return row;
}

void printRow(const tools::BenchArgs& a, const Row& row) {
  std::string railBytes;
  for (const auto& [name, b] : row.report.railBytes) {
    railBytes += (railBytes.empty() ? "" : ",") + name + "=" + std::to_string(b);
  }
  std::printf("%12zu %12zu %8s %7s %12.1f %11.3f %11.3f  %-24s %s  [%s]", row.bytes, row.count,
              nezha::toString(a.dtype), nezha::toString(a.reduce), row.timeUs, row.algbw, row.busbw,
              splitText(row.report).c_str(), row.check.c_str(), railBytes.c_str());
  if (a.vsComposed) std::printf("  %14.1f %7.2fx", row.composedUs, row.composedUs / row.timeUs);
  if (row.paired)
    std::printf("  %12.1f %7.3fx", row.pairedOps.mean, row.timeUs / row.pairedOps.mean);
  std::printf("\n");
  std::fflush(stdout);
}

Json railsJson(nezha::Communicator& c) {
  Json rails = Json::array();
  for (const auto& r : c.rails()) {
    Json j = Json::object();
    j["name"] = r.name;
    j["iface"] = r.iface;
    j["transport"] = r.transport;
    j["address"] = r.address;
    j["probe_latency_us"] = r.latencySeconds * 1e6;
    j["probe_bandwidth_bytes_per_s"] = r.bandwidthBytesPerSecond;
    rails.push_back(j);
  }
  return rails;
}

void putOpTimes(Json& j, const OpTimes& t) {
  j["op_trimmed_us"] = t.trimmed;
  j["op_p50_us"] = t.p50;
  j["op_p99_us"] = t.p99;
  j["op_max_us"] = t.max;
}

Json rowJson(const Row& r) {
  Json j = Json::object();
  j["bytes"] = r.bytes;
  j["count"] = r.count;
  j["time_us"] = r.timeUs;
  putOpTimes(j, r.ops);
  j["algbw_gbps"] = r.algbw;
  j["busbw_gbps"] = r.busbw;
  j["hot"] = r.report.hot;
  Json split = Json::object();
  for (const auto& [name, ratio] : r.report.split) split[name] = ratio;
  j["split"] = split;
  Json rb = Json::object();
  for (const auto& [name, b] : r.report.railBytes) rb[name] = b;
  j["rail_bytes"] = rb;
  j["check"] = r.check;
  if (r.composedUs > 0) {
    j["composed_time_us"] = r.composedUs;
    j["speedup_vs_composed"] = r.composedUs / r.timeUs;
  }
  if (r.paired) {
    Json p = Json::object();
    p["time_us"] = r.pairedOps.mean;
    putOpTimes(p, r.pairedOps);
    p["hot"] = r.pairedReport.hot;
    Json pairedRails = Json::object();
    for (const auto& [name, b] : r.pairedReport.railBytes) pairedRails[name] = b;
    p["rail_bytes"] = pairedRails;
    j["paired"] = p;
  }
  return j;
}

// The results file the bench/ harness reads (format in runtime/README.md).
bool writeJson(nezha::Communicator& c, const nezha::Communicator* paired, const tools::BenchArgs& a,
               const std::vector<Row>& rows) {
  Json root = Json::object();
  root["tool"] = "nezha-bench";
  root["op"] = nezha::toString(a.op);
  root["dtype"] = nezha::toString(a.dtype);
  root["reduce"] = nezha::toString(a.reduce);
  root["world_size"] = c.worldSize();
  root["policy"] = nezha::toString(c.options().policy);
  if (paired) root["paired_policy"] = nezha::toString(paired->options().policy);
  root["cold_threshold"] = c.coldThreshold();
  root["rails"] = railsJson(c);
  struct utsname u;
  uname(&u);
  Json host = Json::object();
  host["cpus"] = static_cast<int>(std::thread::hardware_concurrency());
  host["kernel"] = std::string(u.release);
  root["host"] = host;
  root["warmup"] = a.warmup;
  root["iters"] = a.iters;
  Json results = Json::array();
  for (const Row& r : rows) results.push_back(rowJson(r));
  root["results"] = results;
  std::ofstream f(a.json);
  f << dumpJson(root, 2) << "\n";
  return static_cast<bool>(f);
}

int run(int argc, char** argv) {
  tools::BenchArgs a;
  try {
    if (!tools::parseBenchArgs(argc, argv, a, kUsage)) return 0;
  } catch (const nezha::Error& e) {
    std::fprintf(stderr, "nezha-bench: %s\n", e.what());
    return 2;
  }
  std::unique_ptr<nezha::Communicator> comm;
  try {
    comm = std::make_unique<nezha::Communicator>(nezha::Options::fromEnv());
  } catch (const nezha::ConfigError& e) {
    std::fprintf(stderr, "nezha-bench: %s\n", e.what());
    return 2;
  }
  nezha::Communicator& c = *comm;
  if (a.loopSeconds > 0) return tools::runLoop(c, a);
  // --paired-policy: a second communicator of the same ranks and rails under another policy,
  // joined through the rendezvous port after this one's (and without the control endpoint,
  // which belongs to the first).
  std::unique_ptr<nezha::Communicator> pairedComm;
  if (!a.pairedPolicy.empty()) {
    nezha::Options po = c.options();
    po.policy = nezha::parsePolicy(a.pairedPolicy);
    if (po.rendezvousPort <= 0 || po.rendezvousPort >= 65535) {
      std::fprintf(stderr,
                   "nezha-bench: --paired-policy needs NEZHA_RENDEZVOUS with a port below 65535\n");
      return 2;
    }
    po.rendezvousPort += 1;
    po.controlAddr.clear();
    po.server.reset();
    pairedComm = std::make_unique<nezha::Communicator>(po);
  }
  if (a.root >= c.worldSize()) {
    std::fprintf(stderr, "nezha-bench: --root %d must be < world size %d\n", a.root, c.worldSize());
    return 2;
  }
  const bool rank0 = c.rank() == 0;
  const bool progress = rank0 && !a.quiet && isatty(STDERR_FILENO);
  if (rank0 && !a.quiet) printHeader(c, a);
  std::vector<Row> rows;
  bool anyFailed = false;
  const auto sizes = tools::sizeSweep(a.minBytes, a.maxBytes, a.factor);
  for (size_t si = 0; si < sizes.size(); ++si) {
    if (progress) {
      std::fprintf(stderr, "\r[%zu/%zu] %zu bytes...", si + 1, sizes.size(), sizes[si]);
      std::fflush(stderr);
    }
    rows.push_back(measureSize(c, pairedComm.get(), a, sizes[si]));
    anyFailed |= rows.back().check == "failed";
    if (progress) std::fprintf(stderr, "\r\033[K");
    if (rank0 && !a.quiet) printRow(a, rows.back());
  }
  if (rank0 && !a.json.empty() && !writeJson(c, pairedComm.get(), a, rows)) {
    std::fprintf(stderr, "nezha-bench: cannot write %s\n", a.json.c_str());
    return 3;
  }
  return anyFailed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const nezha::ConfigError& e) {
    std::fprintf(stderr, "nezha-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nezha-bench: %s\n", e.what());
    return 3;
  }
}
