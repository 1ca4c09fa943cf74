// Reduction kernels: dst[i] = dst[i] (op) src[i]; dst and src must not overlap. 16-bit floats are
// widened to float, combined and rounded back to nearest even, so every rank computes bit-identical
// results.
#pragma once

#include <cstddef>

#include "nezha/nezha.hpp"

namespace nezha {

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);
// out[i] = a[i] (op) b[i], the same combination reduceInto makes with dst = a; out overlaps
// neither input. Lets an out-of-place ring write its first partial sums straight from the
// caller's input instead of copying the input first.
void reduceOutOfPlace(void* out, const void* a, const void* b, size_t count, DataType dtype,
                      ReduceOp op);

}  // namespace nezha
