// Reduction kernels: dst[i] = dst[i] (op) src[i]; dst and src must not overlap. 16-bit floats are
// widened to float, combined and rounded back to nearest even, so every rank computes bit-identical
// results.
#pragma once

#include <cstddef>

#include "nezha/nezha.hpp"

namespace nezha {

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

}  // namespace nezha
