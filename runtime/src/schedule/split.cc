#include "schedule/split.h"

#include <cmath>

#include "base/error.h"

namespace nezha {

std::vector<uint32_t> toWeights(const std::vector<double>& ratios) {
  NEZHA_ENFORCE(!ratios.empty(), "no ratios");
  double sum = 0;
  for (double r : ratios) {
    NEZHA_ENFORCE(r >= 0 && std::isfinite(r), "bad ratio ", r);
    sum += r;
  }
  NEZHA_ENFORCE(sum > 0, "all ratios are zero");
  std::vector<uint32_t> w(ratios.size());
  uint64_t total = 0;
  size_t largest = 0;
  for (size_t i = 0; i < ratios.size(); ++i) {
    w[i] = static_cast<uint32_t>(std::floor(ratios[i] / sum * kWeightScale));
    total += w[i];
    if (ratios[i] > ratios[largest]) largest = i;
  }
  w[largest] += static_cast<uint32_t>(kWeightScale - total);
  return w;
}

std::vector<Slice> splitCount(size_t count, const std::vector<uint32_t>& weights, size_t minCount) {
  std::vector<Slice> out;
  if (count == 0) return out;
  std::vector<uint32_t> w = weights;
  auto shareOf = [&](size_t i, uint64_t total) {
    return static_cast<size_t>(static_cast<long double>(count) * w[i] / total);
  };
  while (true) {
    uint64_t total = 0;
    int active = 0;
    for (uint32_t x : w) {
      total += x;
      active += x > 0;
    }
    NEZHA_ENFORCE(total > 0, "no rail has weight");
    if (active == 1) break;
    // Drop the smallest-weight rail (highest index on ties) if its share is too small.
    int victim = -1;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      if (shareOf(i, total) < std::max<size_t>(minCount, 1) && (victim < 0 || w[i] <= w[victim])) {
        victim = static_cast<int>(i);
      }
    }
    if (victim < 0) break;
    w[victim] = 0;
  }
  uint64_t total = 0;
  for (uint32_t x : w) total += x;
  // Boundary k = count * cum_k / total, split as q*cum + rem*cum/total to stay within 64 bits.
  const uint64_t q = count / total, rem = count % total;
  uint64_t cum = 0;
  size_t prev = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0) continue;
    cum += w[i];
    size_t boundary = static_cast<size_t>(q * cum + rem * cum / total);
    if (boundary > prev) out.push_back({static_cast<int>(i), prev, boundary - prev});
    prev = boundary;
  }
  NEZHA_ENFORCE(prev == count, "split does not cover the buffer");
  return out;
}

}  // namespace nezha
