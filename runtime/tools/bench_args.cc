#include "bench_args.h"

#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "base/params.h"

namespace nezha::tools {

namespace {
enum Flag {
  kOp = 256,
  kDtype,
  kReduce,
  kMinBytes,
  kMaxBytes,
  kFactor,
  kWarmup,
  kIters,
  kRoot,
  kCheck,
  kQuiet,
  kJson,
  kLoopSeconds,
  kTrace,
  kReadyFile,
  kVsComposed,
  kPairedPolicy
};
// --json and --out are the same flag: nezha-bench writes results there, nezha-tune the table.
const struct option kLongOptions[] = {{"help", no_argument, nullptr, 'h'},
                                      {"op", required_argument, nullptr, kOp},
                                      {"dtype", required_argument, nullptr, kDtype},
                                      {"reduce", required_argument, nullptr, kReduce},
                                      {"min-bytes", required_argument, nullptr, kMinBytes},
                                      {"max-bytes", required_argument, nullptr, kMaxBytes},
                                      {"factor", required_argument, nullptr, kFactor},
                                      {"warmup", required_argument, nullptr, kWarmup},
                                      {"iters", required_argument, nullptr, kIters},
                                      {"root", required_argument, nullptr, kRoot},
                                      {"check", no_argument, nullptr, kCheck},
                                      {"quiet", no_argument, nullptr, kQuiet},
                                      {"json", required_argument, nullptr, kJson},
                                      {"out", required_argument, nullptr, kJson},
                                      {"loop-seconds", required_argument, nullptr, kLoopSeconds},
                                      {"trace", required_argument, nullptr, kTrace},
                                      {"ready-file", required_argument, nullptr, kReadyFile},
                                      {"vs-composed", no_argument, nullptr, kVsComposed},
                                      {"paired-policy", required_argument, nullptr, kPairedPolicy},
                                      {nullptr, 0, nullptr, 0}};

double positiveSeconds(const std::string& v, const char* flag, double max) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d > 0) || d > max) {
    throw ConfigError(strCat(flag, " ", v, " must be a number of seconds in (0, ", max, "]"));
  }
  return d;
}

void applyFlag(int flag, const std::string& v, BenchArgs& a) {
  switch (flag) {
    case kOp:
      a.op = parseOpKind(v);
      if (a.op == OpKind::kBarrier) throw ConfigError("--op barrier has no size to sweep");
      return;
    case kDtype:
      a.dtype = parseDataType(v);
      return;
    case kReduce:
      a.reduce = parseReduceOp(v);
      return;
    case kMinBytes:
      a.minBytes = parseBytes(v, "--min-bytes");
      return;
    case kMaxBytes:
      a.maxBytes = parseBytes(v, "--max-bytes");
      return;
    case kFactor: {
      char* end = nullptr;
      a.factor = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(a.factor > 1.0) || !(a.factor <= 1024)) {
        throw ConfigError("--factor " + v + " must be a number in (1, 1024]");
      }
      return;
    }
    case kWarmup:
      a.warmup = static_cast<int>(parseInt(v, "--warmup", 0, 1000000));
      return;
    case kIters:
      a.iters = static_cast<int>(parseInt(v, "--iters", 1, 1000000));
      return;
    case kRoot:
      a.root = static_cast<int>(parseInt(v, "--root", 0, 1 << 20));
      return;
    case kCheck:
      a.check = true;
      return;
    case kQuiet:
      a.quiet = true;
      return;
    case kJson:
      a.json = v;
      return;
    case kLoopSeconds:
      a.loopSeconds = positiveSeconds(v, "--loop-seconds", 86400);
      return;
    case kTrace:
      a.trace = v;
      return;
    case kReadyFile:
      if (v.empty()) throw ConfigError("--ready-file needs a file name");
      a.readyFile = v;
      return;
    case kVsComposed:
      a.vsComposed = true;
      return;
    case kPairedPolicy:
      if (v != "adaptive" && v != "static" && v != "single") {
        throw ConfigError(
            strCat("--paired-policy ", v, " is unknown (want adaptive, static or single)"));
      }
      a.pairedPolicy = v;
      return;
  }
  NEZHA_ENFORCE(false, "unhandled flag ", flag);
}
}  // namespace

bool parseBenchArgs(int argc, char** argv, BenchArgs& a, const char* usage) {
  opterr = 0;  // errors become ConfigErrors naming the flag, not getopt's own messages
  optind = 0;  // 0, not 1: glibc then also resets its scan state (parsing more than once)
  for (;;) {
    const int flag = getopt_long(argc, argv, ":h", kLongOptions, nullptr);
    if (flag == -1) break;
    if (flag == 'h') {
      std::fputs(usage, stdout);
      return false;
    }
    // getopt has moved past the offending argument.
    const std::string arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (flag == ':') throw ConfigError(strCat(arg, " needs a value (see --help)"));
    if (flag == '?') throw ConfigError(strCat("unknown flag ", arg, " (see --help)"));
    applyFlag(flag, optarg != nullptr ? optarg : "", a);
  }
  if (optind < argc)
    throw ConfigError(strCat("unexpected argument ", argv[optind], " (see --help)"));
  if (a.minBytes == 0) a.minBytes = 1;
  if (a.maxBytes < a.minBytes) throw ConfigError("--max-bytes is smaller than --min-bytes");
  if (!a.trace.empty() && a.loopSeconds <= 0) throw ConfigError("--trace needs --loop-seconds");
  if (!a.readyFile.empty() && a.loopSeconds <= 0) {
    throw ConfigError("--ready-file needs --loop-seconds");
  }
  if (a.vsComposed && a.op != OpKind::kAlltoall) {
    throw ConfigError("--vs-composed compares alltoall paths: it needs --op alltoall");
  }
  if (!a.pairedPolicy.empty() && (a.loopSeconds > 0 || a.vsComposed)) {
    throw ConfigError("--paired-policy is for sweeps: not with --loop-seconds or --vs-composed");
  }
  if (a.loopSeconds > 0 && (a.op != OpKind::kAllreduce || a.reduce != ReduceOp::kSum)) {
    throw ConfigError("--loop-seconds runs allreduce with --reduce sum only");
  }
  return true;
}

std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, double factor) {
  std::vector<size_t> out;
  double s = static_cast<double>(minBytes);
  while (s <= static_cast<double>(maxBytes) * (1 + 1e-9)) {
    size_t v = static_cast<size_t>(std::llround(s));
    if (out.empty() || v != out.back()) out.push_back(v);
    s *= factor;
  }
  return out;
}

namespace {
bool blocked(OpKind op) {
  return op == OpKind::kAllgather || op == OpKind::kReduceScatter || op == OpKind::kAlltoall;
}
}  // namespace

size_t countFor(OpKind op, size_t bytes, size_t es, int world) {
  size_t per = blocked(op) ? es * static_cast<size_t>(world) : es;
  return std::max<size_t>(1, bytes / per);
}

size_t inputCount(OpKind op, size_t count, int world) {
  const bool all = op == OpKind::kReduceScatter || op == OpKind::kAlltoall;
  return all ? count * static_cast<size_t>(world) : count;
}

size_t outputCount(OpKind op, size_t count, int world) {
  const bool all = op == OpKind::kAllgather || op == OpKind::kAlltoall;
  return all ? count * static_cast<size_t>(world) : count;
}

size_t bytesFor(OpKind op, size_t count, size_t es, int world) {
  if (blocked(op)) {
    return count * es * static_cast<size_t>(world);
  }
  return count * es;
}

double busBandwidthFactor(OpKind op, int world) {
  double n = world;
  switch (op) {
    case OpKind::kAllreduce:
      return 2 * (n - 1) / n;
    case OpKind::kAllgather:
    case OpKind::kReduceScatter:
    case OpKind::kAlltoall:
      return (n - 1) / n;
    case OpKind::kBroadcast:
    case OpKind::kBarrier:
      return 1;
  }
  return 1;
}

namespace {
// Small integers (|sum| <= 8*world): exact in every dtype for world <= 32.
double value(ReduceOp red, int rank, size_t i) {
  if (red == ReduceOp::kProd) return ((static_cast<size_t>(rank) + i) % 2) ? -1.0 : 1.0;
  return static_cast<double>((static_cast<size_t>(rank) * 3 + i) % 8) - 3.0;
}
double reduced(ReduceOp red, int world, size_t i) {
  double acc = value(red, 0, i);
  for (int r = 1; r < world; ++r) {
    double v = value(red, r, i);
    switch (red) {
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  return acc;
}
}  // namespace

void fillInput(OpKind op, DataType t, ReduceOp red, int rank, int root, void* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    double v = value(red, rank, i);
    if (op == OpKind::kBroadcast) v = rank == root ? static_cast<double>(i % 61) : -7.0;
    // Alltoall: element i of rank r's send buffer is (7r + i) % 61, so block b of what rank r
    // receives from p is p's elements [r*count, (r+1)*count).
    if (op == OpKind::kAllgather || op == OpKind::kAlltoall) {
      v = static_cast<double>((static_cast<size_t>(rank) * 7 + i) % 61);
    }
    storeElement(t, buf, i, v);
  }
}

size_t checkOutput(OpKind op, DataType t, ReduceOp red, int rank, int world, int /*root*/,
                   const void* out, size_t count) {
  size_t bad = 0;
  auto expectAt = [&](size_t i) -> double {
    switch (op) {
      case OpKind::kAllreduce:
        return reduced(red, world, i);
      case OpKind::kBroadcast:
        return static_cast<double>(i % 61);
      case OpKind::kAllgather: {
        size_t r = i / count, j = i % count;
        return static_cast<double>((r * 7 + j) % 61);
      }
      case OpKind::kReduceScatter:
        return reduced(red, world, static_cast<size_t>(rank) * count + i);
      case OpKind::kAlltoall: {
        size_t from = i / count, j = i % count;
        return static_cast<double>((from * 7 + static_cast<size_t>(rank) * count + j) % 61);
      }
      case OpKind::kBarrier:
        return 0;
    }
    return 0;
  };
  size_t n = outputCount(op, count, world);
  for (size_t i = 0; i < n; ++i) {
    double want = expectAt(i), got = loadElement(t, out, i);
    // Inputs are small integers, so results are exact; the tolerance only absorbs float noise.
    if (!(std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want)))) ++bad;
  }
  return bad;
}

}  // namespace nezha::tools
