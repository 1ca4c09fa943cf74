#include "rail_split.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "bench_options.h"

namespace gloobench {
namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

double ParseShare(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || !std::isfinite(v) || v <= 0) {
    throw UsageError("--split: want shares > 0 like 0.73,0.27, got '" + text + "'");
  }
  return v;
}

}  // namespace

RailSplit ParseRailSplit(const std::string& ifaceFrom, const std::string& ifaceText,
                         const std::string& splitText) {
  RailSplit s;
  s.ifaces = SplitCommas(ifaceText);
  std::set<std::string> seen;
  for (const auto& name : s.ifaces) {
    if (name.empty()) {
      throw UsageError(ifaceFrom + ": empty interface name in '" + ifaceText + "'");
    }
    // Two contexts on one interface would be a different experiment (more streams, one rail).
    if (!seen.insert(name).second) {
      throw UsageError(ifaceFrom + ": interface '" + name + "' listed twice in '" + ifaceText +
                       "'");
    }
  }
  if (splitText.empty()) {
    if (s.ifaces.size() > 1) {
      throw UsageError("--split: required with several interfaces (" + ifaceFrom + " '" +
                       ifaceText + "'), e.g. --split 0.5,0.5");
    }
    s.shares = {1.0};
    return s;
  }
  double sum = 0;
  for (const auto& part : SplitCommas(splitText)) {
    s.shares.push_back(ParseShare(part));
    sum += s.shares.back();
  }
  if (s.shares.size() != s.ifaces.size()) {
    throw UsageError("--split: " + std::to_string(s.shares.size()) + " shares for " +
                     std::to_string(s.ifaces.size()) + " interfaces in " + ifaceFrom + " '" +
                     ifaceText + "'");
  }
  if (std::fabs(sum - 1.0) > kShareSumTolerance) {
    char sumText[32];
    std::snprintf(sumText, sizeof(sumText), "%g", sum);
    throw UsageError("--split: shares must sum to 1, '" + splitText + "' sums to " + sumText);
  }
  for (double& share : s.shares) share /= sum;
  return s;
}

std::vector<uint64_t> SplitCounts(uint64_t count, const std::vector<double>& shares) {
  std::vector<uint64_t> out;
  out.reserve(shares.size());
  double cumulative = 0;
  uint64_t begin = 0;
  for (size_t i = 0; i < shares.size(); i++) {
    cumulative += shares[i];
    uint64_t end =
        i + 1 == shares.size()
            ? count
            : static_cast<uint64_t>(std::llround(cumulative * static_cast<double>(count)));
    if (end < begin) end = begin;  // rounding can never go backwards, but stay safe
    if (end > count) end = count;
    out.push_back(end - begin);
    begin = end;
  }
  return out;
}

}  // namespace gloobench
