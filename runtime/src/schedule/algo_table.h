// The algorithm table ("nezha-algo/v1"): per collective, which algorithm (and, for allreduce,
// which transport) runs a slice of a given size among a given number of ranks, plus the
// cold/hot threshold per rank count. MCR-DL-style tuning tables; `nezha-tune --algorithms`
// measures and writes one, jobs load it with NEZHA_ALGO_TABLE. Every rank must hold the same
// table: its digest is part of the settings the rendezvous compares (bootstrap/rendezvous.cc),
// so a rank with another table fails the job at start instead of deadlocking in a collective.
//
//   {
//     "format": "nezha-algo/v1",
//     "cold_threshold": [ {"min_ranks": 2, "max_ranks": 4, "bytes": 262144},
//                         {"min_ranks": 5, "bytes": 65536} ],
//     "allreduce": [ {"max_bytes": 16384, "algorithm": "recursive_doubling",
//                     "transport": "sharp"},
//                    {"min_ranks": 4, "max_bytes": 1048576, "algorithm": "halving_doubling"},
//                    {"algorithm": "ring"} ],
//     "broadcast": [ {"max_bytes": 262144, "algorithm": "binomial_tree"},
//                    {"algorithm": "pipelined_chain"} ],
//     "allgather": [ {"algorithm": "ring"} ],
//     "reduce_scatter": [ {"algorithm": "ring"} ],
//     "alltoall": [ {"max_ranks": 8, "algorithm": "direct"},
//                   {"algorithm": "pairwise"} ]
//   }
//
// Rows are tried in order, the first whose ranks (min_ranks..max_ranks, inclusive; defaults 1
// and unlimited) and size (bytes < max_bytes; default unlimited) match wins; a pair no row
// covers takes the built-in rule. Sizes are the bytes one rail carries for the operation
// (allreduce/broadcast: the slice; allgather/reduce_scatter: the slice of all ranks' blocks;
// alltoall: the slice's share of the most any rank sends to its peers);
// a cold operation's slice is the whole operation. "transport": "sharp" (allreduce only) sends
// a cold allreduce the live SHARP rail can reduce to that rail; "any" (the default) keeps it on
// byte-moving rails. Every key outside these is refused, naming it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "collectives/algorithm.h"

namespace nezha {

struct ColdRule {
  int minRanks = 1;
  int maxRanks = INT_MAX;
  size_t bytes = 0;
};

class AlgoTable {
 public:
  // The built-in table (no file): AlgoOptions::builtin with these thresholds, no cold rows.
  explicit AlgoTable(size_t ringThreshold = 64 << 10, size_t chainThreshold = 256 << 10);

  // Parses and validates; throws ConfigError naming the bad field ("<what> allreduce[2].
  // max_bytes: ..."). Collectives the text does not list keep the built-in rules.
  static AlgoTable parse(const std::string& text, const std::string& what,
                         size_t ringThreshold = 64 << 10, size_t chainThreshold = 256 << 10);
  Json toJson() const;

  const AlgoOptions& options() const { return algo_; }
  // The cold/hot threshold for `ranks` ranks, if a row gives one.
  std::optional<size_t> coldThreshold(int ranks) const;
  // Whether a cold allreduce of `bytes` among `ranks` ranks may go to the SHARP rail.
  bool offloadAllreduce(size_t bytes, int ranks) const {
    return algo_.rule(OpKind::kAllreduce, bytes, ranks).offload;
  }

  // Editing (nezha-tune): replaces one collective's rows / the cold rows.
  void setRules(OpKind op, std::vector<AlgoRule> rules) { algo_.rules[op] = std::move(rules); }
  void setColdRules(std::vector<ColdRule> rules) { cold_ = std::move(rules); }
  const std::vector<ColdRule>& coldRules() const { return cold_; }

 private:
  AlgoOptions algo_;
  std::vector<ColdRule> cold_;
};

// The collectives a table lists, in file order, with their key.
const std::vector<std::pair<OpKind, const char*>>& algoTableOps();

}  // namespace nezha
