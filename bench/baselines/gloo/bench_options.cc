#include "bench_options.h"

#include <cerrno>
#include <cstdlib>
#include <iostream>

namespace gloobench {

const char* Usage() {
  return "usage: gloo-bench [--op allreduce] [--dtype float32|float64|int32|int64]\n"
         "                  [--min-bytes 1K] [--max-bytes 256M] [--factor 2] [--warmup N]\n"
         "                  [--iters N] [--check] [--json FILE] [--quiet]\n"
         "                  --rank R --world-size N --iface IFACE --store-dir DIR\n"
         "                  [--rail-name NAME] [--timeout-ms MS]\n"
         "                  [--iface IF1,IF2,... --split S1,S2,...]   (hand split, see below)\n"
         "                  [--loop-seconds S --trace FILE]   (chaos: one size, per-op trace)\n"
         "Ring allreduce from Gloo over one TCP device bound to IFACE; ranks meet in a FileStore\n"
         "under DIR. Env fallbacks: GLOO_BENCH_RANK (or RANK), GLOO_BENCH_WORLD_SIZE (or\n"
         "WORLD_SIZE), GLOO_BENCH_IFACE, GLOO_BENCH_STORE_DIR. Rank 0 prints the table and writes\n"
         "the JSON (same shape as nezha-bench, \"tool\":\"gloo-bench\").\n"
         "Hand split: with several interfaces, one Gloo context (tcp device) per interface; every\n"
         "allreduce is cut into one contiguous chunk per interface by the --split shares (each > "
         "0,\n"
         "summing to 1), the chunks reduced at once, one thread per rail. Not with "
         "--loop-seconds.\n";
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
  }
  return 0;
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

uint64_t ParseBytes(const std::string& what, const std::string& text) {
  if (text.empty()) throw UsageError(what + ": want a size like 4096, 1K, 256M, got ''");
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') digits++;
  std::string suffix = text.substr(digits);
  uint64_t mult = 1;
  if (suffix == "K" || suffix == "k") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "m") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "g") {
    mult = 1ull << 30;
  } else if (!suffix.empty()) {
    throw UsageError(what + ": want a size like 4096, 1K, 256M, got '" + text + "'");
  }
  if (digits == 0) throw UsageError(what + ": want a size like 4096, 1K, 256M, got '" + text + "'");
  errno = 0;
  unsigned long long n = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10);
  if (errno == ERANGE || n > (UINT64_MAX / mult)) {
    throw UsageError(what + ": size '" + text + "' is too large");
  }
  return n * mult;
}

namespace {

int ParseInt(const std::string& what, const std::string& text, int min, int max) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < min || v > max) {
    throw UsageError(what + ": want an integer in " + std::to_string(min) + ".." +
                     std::to_string(max) + ", got '" + text + "'");
  }
  return static_cast<int>(v);
}

DType ParseDType(const std::string& text) {
  if (text == "float32") return DType::kFloat32;
  if (text == "float64") return DType::kFloat64;
  if (text == "int32") return DType::kInt32;
  if (text == "int64") return DType::kInt64;
  throw UsageError("--dtype: want float32, float64, int32 or int64, got '" + text + "'");
}

}  // namespace

std::optional<BenchOptions> ParseOptions(const std::vector<std::string>& args,
                                         const EnvLookup& env) {
  BenchOptions o;
  std::string rank, world, iface, storeDir, splitText;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + ": needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << Usage();
      return std::nullopt;
    } else if (a == "--op") {
      o.op = value();
      if (o.op != "allreduce") {
        throw UsageError("--op: gloo-bench only runs allreduce (the baseline), got '" + o.op + "'");
      }
    } else if (a == "--dtype") {
      o.dtype = ParseDType(value());
    } else if (a == "--min-bytes") {
      o.minBytes = ParseBytes(a, value());
    } else if (a == "--max-bytes") {
      o.maxBytes = ParseBytes(a, value());
    } else if (a == "--factor") {
      o.factor = static_cast<uint64_t>(ParseInt(a, value(), 2, 1024));
    } else if (a == "--warmup") {
      o.warmup = ParseInt(a, value(), 0, 1000000);
    } else if (a == "--iters") {
      o.iters = ParseInt(a, value(), 1, 1000000);
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--json") {
      o.jsonPath = value();
    } else if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--rank") {
      rank = value();
    } else if (a == "--world-size") {
      world = value();
    } else if (a == "--iface") {
      iface = value();
    } else if (a == "--split") {
      splitText = value();
      if (splitText.empty()) throw UsageError("--split: want shares like 0.73,0.27, got ''");
    } else if (a == "--rail-name") {
      o.railName = value();
    } else if (a == "--store-dir") {
      storeDir = value();
    } else if (a == "--loop-seconds") {
      o.loopSeconds = ParseInt(a, value(), 1, 24 * 3600);
    } else if (a == "--trace") {
      o.tracePath = value();
    } else if (a == "--timeout-ms") {
      o.timeoutMs = ParseInt(a, value(), 1, 24 * 3600 * 1000);
    } else {
      throw UsageError("unknown argument '" + a + "' (see --help)");
    }
  }

  // Flag first, then the env names in order; the error names every place that was looked at.
  auto pick = [&](const std::string& flagValue, const std::string& flag,
                  std::vector<std::string> envNames) -> std::pair<std::string, std::string> {
    if (!flagValue.empty()) return {flagValue, flag};
    for (const auto& n : envNames) {
      if (auto v = env(n)) return {*v, n};
    }
    std::string where = flag;
    for (const auto& n : envNames) where += " or " + n;
    throw UsageError(where + ": required");
  };
  auto [worldText, worldFrom] =
      pick(world, "--world-size", {"GLOO_BENCH_WORLD_SIZE", "WORLD_SIZE"});
  o.worldSize = ParseInt(worldFrom, worldText, 1, 4096);
  auto [rankText, rankFrom] = pick(rank, "--rank", {"GLOO_BENCH_RANK", "RANK"});
  o.rank = ParseInt(rankFrom, rankText, 0, o.worldSize - 1);
  auto [ifaceText, ifaceFrom] = pick(iface, "--iface", {"GLOO_BENCH_IFACE"});
  o.iface = ifaceText;
  o.split = ParseRailSplit(ifaceFrom, ifaceText, splitText);
  o.storeDir = pick(storeDir, "--store-dir", {"GLOO_BENCH_STORE_DIR"}).first;
  if (o.HandSplit() && !o.railName.empty()) {
    throw UsageError(
        "--rail-name: only with one interface; a hand split names its rails after "
        "their interfaces");
  }
  if (o.HandSplit() && o.loopSeconds > 0) {
    // The chaos loop judges one rail's failure; a split op would mix several rails' timeouts.
    throw UsageError("--loop-seconds: only with one interface, not with a hand split");
  }
  if (o.railName.empty()) o.railName = o.iface;

  if ((o.loopSeconds > 0) != !o.tracePath.empty()) {
    throw UsageError(o.loopSeconds > 0 ? "--trace: required with --loop-seconds"
                                       : "--loop-seconds: required with --trace");
  }
  if (o.minBytes == 0) throw UsageError("--min-bytes: must be at least 1");
  if (o.maxBytes < o.minBytes) {
    throw UsageError("--max-bytes: " + std::to_string(o.maxBytes) + " is below --min-bytes " +
                     std::to_string(o.minBytes));
  }
  if (SweepSizes(o).empty()) {
    throw UsageError("--max-bytes: no size in the sweep holds one " +
                     std::string(DTypeName(o.dtype)) + " element");
  }
  return o;
}

std::vector<uint64_t> SweepSizes(const BenchOptions& opts) {
  std::vector<uint64_t> sizes;
  const uint64_t elem = DTypeSize(opts.dtype);
  for (uint64_t b = opts.minBytes; b <= opts.maxBytes; b *= opts.factor) {
    uint64_t whole = b / elem * elem;
    if (whole > 0 && (sizes.empty() || sizes.back() != whole)) sizes.push_back(whole);
    if (b > opts.maxBytes / opts.factor) break;  // next step would overflow or pass the end
  }
  return sizes;
}

}  // namespace gloobench
