#include "tune_algorithms.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "schedule/algo_table.h"
#include "schedule/table.h"

namespace nezha::tools {

namespace {

struct Candidate {
  Algorithm algorithm;
  bool sharp;
  std::string label() const { return std::string(toString(algorithm)) + (sharp ? "+sharp" : ""); }
};

// A table whose one row sends every size of `op` to `c`.
std::string forcing(const char* key, const Candidate& c) {
  Json row = Json::object();
  row["algorithm"] = toString(c.algorithm);
  if (std::string(key) == "allreduce") row["transport"] = c.sharp ? "sharp" : "any";
  Json root = Json::object();
  root["format"] = "nezha-algo/v1";
  root[key] = Json::array({row});
  return dumpJson(root);
}

struct Buffers {
  size_t count = 0, bytes = 0;
  std::vector<char> in, out;
};

Buffers buffersFor(Communicator& c, OpKind op, const BenchArgs& a, size_t bytesWanted) {
  const int world = c.worldSize();
  const size_t es = dataTypeSize(a.dtype);
  Buffers b;
  b.count = countFor(op, bytesWanted, es, world);
  b.bytes = bytesFor(op, b.count, es, world);
  const size_t inCount = inputCount(op, b.count, world);
  const size_t outCount = outputCount(op, b.count, world);
  b.in.resize(inCount * es);
  b.out.resize(outCount * es);
  fillInput(op, a.dtype, a.reduce, c.rank(), 0, b.in.data(), inCount);
  return b;
}

// Rows of one collective for exactly `world` ranks from the winner per measured size: a winner
// holds until the first size another wins (max_bytes = that size); the last one is open-ended.
std::vector<AlgoRule> rowsFrom(const std::vector<size_t>& sizes,
                               const std::vector<Candidate>& winners, int world) {
  std::vector<AlgoRule> rows;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool last = i + 1 == sizes.size();
    if (!last && winners[i + 1].algorithm == winners[i].algorithm &&
        winners[i + 1].sharp == winners[i].sharp) {
      continue;
    }
    AlgoRule r;
    r.minRanks = r.maxRanks = world;
    r.maxBytes = last ? kAnyBytes : sizes[i + 1];
    r.algorithm = winners[i].algorithm;
    r.offload = winners[i].sharp;
    rows.push_back(r);
  }
  return rows;
}

bool onlyFor(int minRanks, int maxRanks, int world) {
  return minRanks == world && maxRanks == world;
}

}  // namespace

double timeOps(Communicator& c, OpKind op, const BenchArgs& a, std::vector<char>& in,
               std::vector<char>& out, size_t count, int iters, OpReport* report) {
  auto once = [&] {
    switch (op) {
      case OpKind::kAllreduce:
        return c.allreduce(in.data(), out.data(), count, a.dtype, a.reduce);
      case OpKind::kBroadcast:
        return c.broadcast(out.data(), count, a.dtype, 0);
      case OpKind::kAllgather:
        return c.allgather(in.data(), out.data(), count, a.dtype);
      case OpKind::kReduceScatter:
        return c.reduceScatter(in.data(), out.data(), count, a.dtype, a.reduce);
      case OpKind::kAlltoall:
        return c.alltoall(in.data(), out.data(), count, a.dtype);
      case OpKind::kBarrier:
        return c.barrier();
    }
  };
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report != nullptr) *report = c.lastReport();
  // The slowest rank's time decides, and every rank must decide the same.
  c.allreduce(&local, &local, 1, DataType::kFloat64, ReduceOp::kMax);
  return local / iters;
}

int tuneAlgorithms(Communicator& c, const BenchArgs& a, const std::string& merge) {
  const int world = c.worldSize();
  const size_t never = kNeverSplitBytes;
  const std::vector<size_t> sweep = sizeSweep(a.minBytes, a.maxBytes, a.factor);
  bool sharpRail = false;
  for (const RailInfo& r : c.rails()) sharpRail = sharpRail || r.transport == "sharp";
  const bool talk = c.rank() == 0 && !a.quiet;

  AlgoTable table;
  if (!merge.empty()) {
    std::ifstream in(merge);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    if (!in) throw ConfigError("--merge " + merge + ": cannot read file");
    AlgoTable old = AlgoTable::parse(ss.str(), "--merge " + merge);
    table = old;
  }

  // Algorithms run per rail slice: time them cold, the whole operation on one rail.
  c.setColdThreshold(never);
  for (const auto& [op, key] : algoTableOps()) {
    std::vector<Candidate> cands;
    for (Algorithm alg : {Algorithm::kRing, Algorithm::kRecursiveDoubling,
                          Algorithm::kHalvingDoubling, Algorithm::kBinomialTree,
                          Algorithm::kPipelinedChain, Algorithm::kPairwise, Algorithm::kDirect}) {
      if (implements(alg, op)) cands.push_back({alg, false});
    }
    if (op == OpKind::kAllreduce && sharpRail) cands.push_back({Algorithm::kRing, true});
    std::vector<size_t> sizes;
    std::vector<Candidate> winners;
    if (cands.size() == 1) {
      sizes.push_back(0);
      winners.push_back(cands[0]);
    } else {
      if (talk) {
        std::printf("# %s, %d ranks: us per operation (ratio to %s)\n%12s", key, world,
                    cands[0].label().c_str(), "size(B)");
        for (const Candidate& cd : cands) std::printf(" %24s", cd.label().c_str());
        std::printf("  winner\n");
      }
      for (size_t wanted : sweep) {
        Buffers b = buffersFor(c, op, a, wanted);
        std::vector<double> t;
        for (const Candidate& cd : cands) {
          c.setAlgoTable(forcing(key, cd));
          timeOps(c, op, a, b.in, b.out, b.count, a.warmup);
          t.push_back(timeOps(c, op, a, b.in, b.out, b.count, a.iters));
        }
        size_t best = 0;
        for (size_t i = 1; i < t.size(); ++i) best = t[i] < t[best] ? i : best;
        sizes.push_back(b.bytes);
        winners.push_back(cands[best]);
        if (talk) {
          std::printf("%12zu", b.bytes);
          for (double x : t) {
            char cell[40];
            std::snprintf(cell, sizeof(cell), "%.1f (%.2fx)", x * 1e6, x / t[0]);
            std::printf(" %24s", cell);
          }
          std::printf("  %s\n", cands[best].label().c_str());
          std::fflush(stdout);
        }
      }
    }
    std::vector<AlgoRule> rows = rowsFrom(sizes, winners, world);
    // This world size's rows first (the first match wins), then the kept rows of other sizes.
    auto it = table.options().rules.find(op);
    if (!merge.empty() && it != table.options().rules.end()) {
      for (const AlgoRule& r : it->second) {
        if (!onlyFor(r.minRanks, r.maxRanks, world)) rows.push_back(r);
      }
    }
    table.setRules(op, rows);
  }
  c.setAlgoTable(dumpJson(table.toJson()));

  // The allreduce cold threshold for this world size, with the chosen algorithms: the smallest
  // size from which splitting wins at every larger size.
  std::vector<bool> hotWins;
  std::vector<size_t> sizes;
  if (talk)
    std::printf("# allreduce cold vs hot, %d ranks\n%12s %12s %12s\n", world, "size(B)", "hot(us)",
                "cold(us)");
  for (size_t wanted : sweep) {
    Buffers b = buffersFor(c, OpKind::kAllreduce, a, wanted);
    c.setColdThreshold(0);
    timeOps(c, OpKind::kAllreduce, a, b.in, b.out, b.count, std::max(a.warmup, 20));
    const double hot = timeOps(c, OpKind::kAllreduce, a, b.in, b.out, b.count, a.iters);
    const bool split = c.lastReport().hot;
    c.setColdThreshold(never);
    const double cold = timeOps(c, OpKind::kAllreduce, a, b.in, b.out, b.count, a.iters);
    hotWins.push_back(split && hot < cold);
    sizes.push_back(b.bytes);
    if (talk) std::printf("%12zu %12.1f %12.1f\n", b.bytes, hot * 1e6, cold * 1e6);
  }
  size_t threshold = never;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (!hotWins[i]) break;
    threshold = sizes[i];
  }
  std::vector<ColdRule> cold{ColdRule{world, world, threshold}};
  for (const ColdRule& r : table.coldRules()) {
    if (!onlyFor(r.minRanks, r.maxRanks, world)) cold.push_back(r);
  }
  table.setColdRules(cold);
  if (c.rank() == 0) {
    std::ofstream out(a.json);
    out << dumpJson(table.toJson(), 2) << "\n";
    if (!out) throw ConfigError("cannot write " + a.json);
    if (!a.quiet) {
      std::printf("# cold threshold %zu bytes at %d ranks; algorithm table written to %s\n",
                  threshold, world, a.json.c_str());
    }
  }
  c.barrier();
  return 0;
}

}  // namespace nezha::tools
