#include "collectives/algorithm.h"

#include "base/error.h"

namespace nezha {

namespace {
struct Named {
  Algorithm algorithm;
  const char* name;
  std::vector<OpKind> ops;
};
const std::vector<Named>& named() {
  static const std::vector<Named> all = {
      {Algorithm::kRing, "ring", {OpKind::kAllreduce, OpKind::kAllgather, OpKind::kReduceScatter}},
      {Algorithm::kRecursiveDoubling, "recursive_doubling", {OpKind::kAllreduce}},
      {Algorithm::kHalvingDoubling, "halving_doubling", {OpKind::kAllreduce}},
      {Algorithm::kBinomialTree, "binomial_tree", {OpKind::kBroadcast}},
      {Algorithm::kPipelinedChain, "pipelined_chain", {OpKind::kBroadcast}},
      {Algorithm::kPairwise, "pairwise", {OpKind::kAlltoall}},
      {Algorithm::kDirect, "direct", {OpKind::kAlltoall}},
  };
  return all;
}
}  // namespace

const char* toString(Algorithm a) {
  for (const Named& n : named()) {
    if (n.algorithm == a) return n.name;
  }
  return "unknown";
}

std::optional<Algorithm> parseAlgorithm(const std::string& name) {
  for (const Named& n : named()) {
    if (name == n.name) return n.algorithm;
  }
  return std::nullopt;
}

bool implements(Algorithm a, OpKind op) {
  for (const Named& n : named()) {
    if (n.algorithm != a) continue;
    for (OpKind k : n.ops) {
      if (k == op) return true;
    }
  }
  return false;
}

std::string algorithmsFor(OpKind op) {
  std::string s;
  for (const Named& n : named()) {
    if (implements(n.algorithm, op)) s += strCat(s.empty() ? "" : ", ", n.name);
  }
  return s;
}

AlgoOptions AlgoOptions::builtin(size_t ringThreshold, size_t chainThreshold) {
  AlgoOptions o;
  AlgoRule rd, ring, tree, chain, anyRing, fewRanks, direct, pairwise;
  rd.maxBytes = ringThreshold;
  rd.algorithm = Algorithm::kRecursiveDoubling;
  rd.offload = true;
  ring.algorithm = Algorithm::kRing;
  ring.offload = true;
  // Binomial up to and including chainThreshold (the historical NEZHA_CHAIN_THRESHOLD
  // meaning), and always for 2 ranks (a chain of two is the tree).
  tree.maxRanks = 2;
  tree.algorithm = Algorithm::kBinomialTree;
  AlgoRule small = tree;
  small.maxRanks = INT_MAX;
  small.maxBytes = chainThreshold == kAnyBytes ? kAnyBytes : chainThreshold + 1;
  chain.algorithm = Algorithm::kPipelinedChain;
  o.fallback[OpKind::kAllreduce] = {rd, ring};
  o.fallback[OpKind::kBroadcast] = {tree, small, chain};
  o.fallback[OpKind::kAllgather] = {anyRing};
  o.fallback[OpKind::kReduceScatter] = {anyRing};
  fewRanks.maxRanks = kAlltoallDirectMaxRanks;
  fewRanks.algorithm = Algorithm::kDirect;
  direct.maxBytes = kAlltoallDirectBytes;
  direct.algorithm = Algorithm::kDirect;
  pairwise.algorithm = Algorithm::kPairwise;
  o.fallback[OpKind::kAlltoall] = {fewRanks, direct, pairwise};
  o.rules = o.fallback;
  return o;
}

const AlgoRule& AlgoOptions::rule(OpKind op, size_t bytes, int ranks) const {
  for (const auto* table : {&rules, &fallback}) {
    auto it = table->find(op);
    if (it == table->end()) continue;
    for (const AlgoRule& r : it->second) {
      if (r.matches(bytes, ranks)) return r;
    }
  }
  // Every built-in list ends in a catch-all; only a barrier (no rules) gets here.
  static const AlgoRule kRingRule{};
  NEZHA_ENFORCE(op == OpKind::kBarrier, "no algorithm rule for ", toString(op));
  return kRingRule;
}

}  // namespace nezha
