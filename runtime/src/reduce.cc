#include "reduce.h"

#include <algorithm>
#include <cstdint>

#include "dtype.h"
#include "error.h"

namespace nezha {

namespace {
struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
// min/max written without std::min so NaN handling is the same on every rank (b wins only
// when strictly smaller/larger).
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

// dst and src never overlap (callers reduce a received buffer into the local one); saying so
// with __restrict__ lets the compiler vectorize without runtime alias checks.
template <typename T, typename Op>
void loop(void* dst, const void* src, size_t n, Op op) {
  T* __restrict__ d = static_cast<T*>(dst);
  const T* __restrict__ s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = op(d[i], s[i]);
}

// Integer sum/prod wrap modulo 2^N (done in unsigned to avoid undefined overflow).
template <typename T, typename U, typename Op>
void intLoop(void* dst, const void* src, size_t n, Op op) {
  T* __restrict__ d = static_cast<T*>(dst);
  const T* __restrict__ s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) {
    d[i] = static_cast<T>(op(static_cast<U>(d[i]), static_cast<U>(s[i])));
  }
}

template <typename Op>
void halfLoop(void* dst, const void* src, size_t n, Op op, bool bf16) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (bf16) {
    for (size_t i = 0; i < n; ++i) {
      d[i] = floatToBfloat16(op(bfloat16ToFloat(d[i]), bfloat16ToFloat(s[i])));
    }
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = floatToHalf(op(halfToFloat(d[i]), halfToFloat(s[i])));
  }
}

template <typename Op>
void dispatch(void* dst, const void* src, size_t n, DataType dt, Op op, bool wrapInts) {
  switch (dt) {
    case DataType::kFloat32:
      return loop<float>(dst, src, n, op);
    case DataType::kFloat64:
      return loop<double>(dst, src, n, op);
    case DataType::kFloat16:
      return halfLoop(dst, src, n, op, false);
    case DataType::kBFloat16:
      return halfLoop(dst, src, n, op, true);
    case DataType::kInt32:
      if (wrapInts) return intLoop<int32_t, uint32_t>(dst, src, n, op);
      return loop<int32_t>(dst, src, n, op);
    case DataType::kInt64:
      if (wrapInts) return intLoop<int64_t, uint64_t>(dst, src, n, op);
      return loop<int64_t>(dst, src, n, op);
  }
  NEZHA_ENFORCE(false, "unknown data type");
}
}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (op) {
    case ReduceOp::kSum:
      return dispatch(dst, src, count, dtype, Sum{}, true);
    case ReduceOp::kProd:
      return dispatch(dst, src, count, dtype, Prod{}, true);
    case ReduceOp::kMin:
      return dispatch(dst, src, count, dtype, Min{}, false);
    case ReduceOp::kMax:
      return dispatch(dst, src, count, dtype, Max{}, false);
  }
  NEZHA_ENFORCE(false, "unknown reduce op");
}

}  // namespace nezha
