#include "base/reduce.h"

#include <algorithm>
#include <cstdint>

#include "base/dtype.h"
#include "base/error.h"

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
// The kernels take the output separately from the first operand: out == a is in place
// (reduceInto), out apart from both is out of place. Neither input ever aliases b, and in the
// out-of-place case out aliases nothing; the in-place loop is a separate instantiation so
// __restrict__ stays truthful and both vectorize.
template <typename T, typename Op>
void loopInPlace(T* __restrict__ d, const T* __restrict__ s, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) d[i] = op(d[i], s[i]);
}
template <typename T, typename Op>
void loopApart(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, size_t n,
               Op op) {
  for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}
template <typename T, typename Op>
void loop(void* out, const void* a, const void* b, size_t n, Op op) {
  if (out == a) return loopInPlace(static_cast<T*>(out), static_cast<const T*>(b), n, op);
  loopApart(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
}

// Integer sum/prod wrap modulo 2^N (done in unsigned to avoid undefined overflow).
template <typename T, typename U, typename Op>
void intLoop(void* out, const void* a, const void* b, size_t n, Op op) {
  struct Wrap {
    Op op;
    T operator()(T x, T y) const {
      return static_cast<T>(op(static_cast<U>(x), static_cast<U>(y)));
    }
  };
  loop<T>(out, a, b, n, Wrap{op});
}

template <typename Op>
void halfLoop(void* out, const void* a, const void* b, size_t n, Op op, bool bf16) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  if (bf16) {
    for (size_t i = 0; i < n; ++i) {
      o[i] = floatToBfloat16(op(bfloat16ToFloat(x[i]), bfloat16ToFloat(y[i])));
    }
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = floatToHalf(op(halfToFloat(x[i]), halfToFloat(y[i])));
  }
}

template <typename Op>
void dispatch(void* out, const void* a, const void* b, size_t n, DataType dt, Op op,
              bool wrapInts) {
  switch (dt) {
    case DataType::kFloat32:
      return loop<float>(out, a, b, n, op);
    case DataType::kFloat64:
      return loop<double>(out, a, b, n, op);
    case DataType::kFloat16:
      return halfLoop(out, a, b, n, op, false);
    case DataType::kBFloat16:
      return halfLoop(out, a, b, n, op, true);
    case DataType::kInt32:
      if (wrapInts) return intLoop<int32_t, uint32_t>(out, a, b, n, op);
      return loop<int32_t>(out, a, b, n, op);
    case DataType::kInt64:
      if (wrapInts) return intLoop<int64_t, uint64_t>(out, a, b, n, op);
      return loop<int64_t>(out, a, b, n, op);
  }
  NEZHA_ENFORCE(false, "unknown data type");
}

void reduce(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (op) {
    case ReduceOp::kSum:
      return dispatch(out, a, b, count, dtype, Sum{}, true);
    case ReduceOp::kProd:
      return dispatch(out, a, b, count, dtype, Prod{}, true);
    case ReduceOp::kMin:
      return dispatch(out, a, b, count, dtype, Min{}, false);
    case ReduceOp::kMax:
      return dispatch(out, a, b, count, dtype, Max{}, false);
  }
  NEZHA_ENFORCE(false, "unknown reduce op");
}
}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  reduce(dst, dst, src, count, dtype, op);
}

void reduceOutOfPlace(void* out, const void* a, const void* b, size_t count, DataType dtype,
                      ReduceOp op) {
  NEZHA_ENFORCE(out != a && out != b, "reduceOutOfPlace: output aliases an input");
  reduce(out, a, b, count, dtype, op);
}

}  // namespace nezha
