// Split arithmetic: turning per-rail ratios into element ranges. Ratios are first quantized to
// integer weights (parts of kWeightScale) so the boundaries are pure integer math and every rank
// computes exactly the same slices from the same agreed ratios.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nezha {

constexpr uint32_t kWeightScale = 1u << 20;

struct Slice {
  int rail;
  size_t offset;  // in elements (of the split unit)
  size_t count;
};

// Normalizes non-negative ratios to weights summing to exactly kWeightScale (remainder to the
// largest). All-zero or empty input is a bug check.
std::vector<uint32_t> toWeights(const std::vector<double>& ratios);

// Contiguous, ordered, non-empty slices covering [0, count). A rail whose share would be below
// minCount elements is dropped (smallest weight first) and its share goes to the others, so
// tiny operations are not fragmented; at least one rail always remains.
std::vector<Slice> splitCount(size_t count, const std::vector<uint32_t>& weights, size_t minCount);

}  // namespace nezha
