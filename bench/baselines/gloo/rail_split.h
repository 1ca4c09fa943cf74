// The hand split of gloo-bench (`--iface r0,r1 --split 0.73,0.27`): which interfaces carry an
// allreduce and which share of its elements each one gets. This is the "Gloo hand-split at the
// best static ratio" baseline of the suite (bench/README.md, "Ratios and goals"): what a user
// gets by cutting every buffer by hand and running one Gloo context per rail, with no scheduler
// in between.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gloobench {

struct RailSplit {
  std::vector<std::string> ifaces;  // one Gloo context (tcp device) per interface
  std::vector<double> shares;       // same length, each > 0, summing to 1
};

// How far the shares may sum from 1: room for shares written with a few decimals (1/3 as 0.333,
// three times) without accepting a typo such as 0.7,0.7.
constexpr double kShareSumTolerance = 0.005;

// ifaceText: "r0" or "r0,r1,..." (named by ifaceFrom in errors: the flag or the env variable).
// splitText: "" (allowed only with one interface: share 1) or one share per interface.
// The shares are renormalised to sum to exactly 1. Throws UsageError naming the flag at fault.
RailSplit ParseRailSplit(const std::string& ifaceFrom, const std::string& ifaceText,
                         const std::string& splitText);

// Cuts `count` elements into one contiguous chunk per share, in order. The chunk boundaries are
// the rounded cumulative shares, so the chunks always add up to `count` exactly; a chunk may be
// empty when count is tiny.
std::vector<uint64_t> SplitCounts(uint64_t count, const std::vector<double>& shares);

}  // namespace gloobench
