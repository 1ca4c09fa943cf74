// Reduction kernels per dtype and op, and the 16-bit float conversions (round to nearest even,
// subnormals, overflow, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/dtype.h"
#include "base/reduce.h"

namespace nezha {
namespace {

TEST(HalfTest, ExactValuesRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.00006103515625f /* min normal */,
                  5.960464477539063e-08f /* min subnormal */}) {
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f) << f;
  }
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above halfway rounds up.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  // Subnormal halfway: 0.5 * 2^-24 ties to even zero; 1.5 * 2^-24 -> 2 * 2^-24.
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToHalf(1.5f * std::ldexp(1.0f, -24)), 0x0002);
}

TEST(HalfTest, OverflowInfAndNan) {
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // ties away to infinity (even)
  EXPECT_EQ(floatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
}

TEST(BFloat16Test, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(floatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bfloat16ToFloat(0x3f81), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
}

template <typename T>
std::vector<T> reduced(std::vector<T> a, const std::vector<T>& b, DataType t, ReduceOp op) {
  reduceInto(a.data(), b.data(), a.size(), t, op);
  return a;
}

TEST(ReduceTest, Float32AllOps) {
  std::vector<float> a{1, -2, 3.5f}, b{4, 5, -1};
  EXPECT_EQ(reduced(a, b, DataType::kFloat32, ReduceOp::kSum), (std::vector<float>{5, 3, 2.5f}));
  EXPECT_EQ(reduced(a, b, DataType::kFloat32, ReduceOp::kProd),
            (std::vector<float>{4, -10, -3.5f}));
  EXPECT_EQ(reduced(a, b, DataType::kFloat32, ReduceOp::kMin), (std::vector<float>{1, -2, -1}));
  EXPECT_EQ(reduced(a, b, DataType::kFloat32, ReduceOp::kMax), (std::vector<float>{4, 5, 3.5f}));
}

TEST(ReduceTest, Float64AllOps) {
  std::vector<double> a{1e300, -0.5}, b{1e300, 0.25};
  EXPECT_EQ(reduced(a, b, DataType::kFloat64, ReduceOp::kSum), (std::vector<double>{2e300, -0.25}));
  EXPECT_EQ(reduced(a, b, DataType::kFloat64, ReduceOp::kMin), (std::vector<double>{1e300, -0.5}));
  EXPECT_TRUE(std::isinf(reduced(a, b, DataType::kFloat64, ReduceOp::kProd)[0]));
}

TEST(ReduceTest, IntegersWrapAndCompare) {
  std::vector<int32_t> a{INT32_MAX, -5, 7}, b{1, 3, -7};
  EXPECT_EQ(reduced(a, b, DataType::kInt32, ReduceOp::kSum),
            (std::vector<int32_t>{INT32_MIN, -2, 0}));
  EXPECT_EQ(reduced(a, b, DataType::kInt32, ReduceOp::kProd),
            (std::vector<int32_t>{INT32_MAX, -15, -49}));
  EXPECT_EQ(reduced(a, b, DataType::kInt32, ReduceOp::kMin), (std::vector<int32_t>{1, -5, -7}));
  std::vector<int64_t> c{INT64_MIN, 1LL << 40}, d{-1, 1LL << 40};
  EXPECT_EQ(reduced(c, d, DataType::kInt64, ReduceOp::kSum),
            (std::vector<int64_t>{INT64_MAX, 1LL << 41}));
  EXPECT_EQ(reduced(c, d, DataType::kInt64, ReduceOp::kMax), (std::vector<int64_t>{-1, 1LL << 40}));
}

TEST(ReduceTest, Float16SumRoundsResultToNearestEven) {
  // 2048 + 1 is not representable in half (spacing 2 above 2048): ties to even -> 2048;
  // 2050 + 1 = 2051 ties to 2052 (even mantissa).
  std::vector<uint16_t> a{floatToHalf(2048), floatToHalf(2050), floatToHalf(0.1f)};
  std::vector<uint16_t> b{floatToHalf(1), floatToHalf(1), floatToHalf(0.2f)};
  auto r = reduced(a, b, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(halfToFloat(r[0]), 2048.0f);
  EXPECT_EQ(halfToFloat(r[1]), 2052.0f);
  EXPECT_EQ(r[2], floatToHalf(halfToFloat(a[2]) + halfToFloat(b[2])));
  auto m = reduced(a, b, DataType::kFloat16, ReduceOp::kMax);
  EXPECT_EQ(halfToFloat(m[0]), 2048.0f);
  EXPECT_EQ(halfToFloat(m[2]), halfToFloat(floatToHalf(0.2f)));
}

TEST(ReduceTest, BFloat16SumAndProdRound) {
  // 256 + 1: bfloat16 spacing at 256 is 2, tie -> even 256. 258 + 1 -> 260.
  std::vector<uint16_t> a{floatToBfloat16(256), floatToBfloat16(258), floatToBfloat16(3)};
  std::vector<uint16_t> b{floatToBfloat16(1), floatToBfloat16(1), floatToBfloat16(-0.5f)};
  auto s = reduced(a, b, DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(bfloat16ToFloat(s[0]), 256.0f);
  EXPECT_EQ(bfloat16ToFloat(s[1]), 260.0f);
  EXPECT_EQ(bfloat16ToFloat(s[2]), 2.5f);
  auto p = reduced(a, b, DataType::kBFloat16, ReduceOp::kProd);
  EXPECT_EQ(bfloat16ToFloat(p[2]), -1.5f);
  auto mn = reduced(a, b, DataType::kBFloat16, ReduceOp::kMin);
  EXPECT_EQ(bfloat16ToFloat(mn[2]), -0.5f);
}

TEST(ReduceTest, ZeroCountTouchesNothing) {
  float a = 1, b = 2;
  reduceInto(&a, &b, 0, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(a, 1);
}

TEST(DataTypeTest, NamesSizesAndParsing) {
  EXPECT_EQ(dataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(parseDataType("float16"), DataType::kFloat16);
  EXPECT_THROW(parseDataType("half"), ConfigError);
  EXPECT_EQ(parseReduceOp("max"), ReduceOp::kMax);
  EXPECT_THROW(parseReduceOp("avg"), ConfigError);
}

}  // namespace
}  // namespace nezha
