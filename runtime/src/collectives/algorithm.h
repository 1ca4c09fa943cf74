// Which algorithm runs one rail's slice of a collective: the per-operation rules the
// algorithm table (schedule/algo_table.h) is made of, and the choice every rank makes from
// them. The choice depends only on the collective, the slice's bytes and the rank count, so
// ranks that hold the same rules (the rendezvous checks they do) pick the same algorithm.
#pragma once

#include <climits>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nezha/nezha.hpp"

namespace nezha {

enum class Algorithm : int {
  kRing,               // allreduce, allgather, reduce_scatter: bandwidth-optimal, 2(n-1) steps
  kRecursiveDoubling,  // allreduce: log2(n) whole-buffer exchanges, latency-optimal
  kHalvingDoubling,    // allreduce (Rabenseifner): halving reduce-scatter + doubling allgather
  kBinomialTree,       // broadcast: log2(n) rounds
  kPipelinedChain,     // broadcast: a forwarding line, time -> bytes / bandwidth
  kPairwise,           // alltoall: n-1 steps, in step s send to r+s and receive from r-s
  kDirect,             // alltoall: every message posted at once, one round of latency
};

const char* toString(Algorithm a);
std::optional<Algorithm> parseAlgorithm(const std::string& name);
// Whether `a` implements collective `op` (the table parser refuses other pairs).
bool implements(Algorithm a, OpKind op);
// "ring, recursive_doubling, ..." for error messages.
std::string algorithmsFor(OpKind op);

constexpr size_t kAnyBytes = ~size_t(0);
// Built-in alltoall rules: up to kAlltoallDirectMaxRanks ranks every message is posted at once
// (direct) at every size: on the test bed it tied pairwise at 2 ranks (the same single step)
// and beat it by 11-14 % at 1-4 MiB with 4 ranks (bench/results/issue18-perf). Above that,
// slices from kAlltoallDirectBytes go pairwise: one peer pair per step bounds what converges on
// a rank's link at once (incast), the textbook reason, not measured here (no bed that large).
// Not env knobs: the algorithm table is the knob.
constexpr int kAlltoallDirectMaxRanks = 8;
constexpr size_t kAlltoallDirectBytes = 256 << 10;

// One row of a per-operation table: slices of fewer than maxBytes bytes among minRanks..maxRanks
// ranks run `algorithm`. Rows are tried in order; the first that matches wins.
struct AlgoRule {
  int minRanks = 1;
  int maxRanks = INT_MAX;
  size_t maxBytes = kAnyBytes;
  Algorithm algorithm = Algorithm::kRing;
  // Allreduce only: an operation that runs cold (whole on one rail) goes to a live SHARP rail
  // when that rail can reduce its type and operator (the scheduler reads this; collectives
  // ignore it).
  bool offload = false;

  bool matches(size_t bytes, int ranks) const {
    return ranks >= minRanks && ranks <= maxRanks && bytes < maxBytes;
  }
  bool operator==(const AlgoRule& o) const {
    return minRanks == o.minRanks && maxRanks == o.maxRanks && maxBytes == o.maxBytes &&
           algorithm == o.algorithm && offload == o.offload;
  }
};

// The rules of every collective. An operation whose rules do not cover a (size, ranks) pair
// falls back to the built-in rule for it, so every choice is defined.
struct AlgoOptions {
  std::map<OpKind, std::vector<AlgoRule>> rules;
  // Tried after `rules`; the built-in rules, each list ending in a catch-all.
  std::map<OpKind, std::vector<AlgoRule>> fallback;
  // The built-in rules: allreduce below ringThreshold by recursive doubling, else ring (and
  // SHARP for cold allreduces); broadcast up to chainThreshold by binomial tree, else chain;
  // allgather and reduce_scatter by ring; alltoall direct up to kAlltoallDirectMaxRanks ranks
  // or below kAlltoallDirectBytes, else pairwise.
  static AlgoOptions builtin(size_t ringThreshold = 64 << 10, size_t chainThreshold = 256 << 10);

  // The first matching rule for a slice of `bytes` among `ranks` ranks (built-in if none).
  const AlgoRule& rule(OpKind op, size_t bytes, int ranks) const;
  Algorithm choose(OpKind op, size_t bytes, int ranks) const {
    return rule(op, bytes, ranks).algorithm;
  }
};

}  // namespace nezha
