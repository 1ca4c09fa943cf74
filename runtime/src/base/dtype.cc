#include "base/dtype.h"

#include <cmath>
#include <cstring>

#include "base/error.h"

namespace nezha {

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
  }
  NEZHA_ENFORCE(false, "unknown data type ", static_cast<int>(t));
}

const char* toString(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "?";
}

DataType parseDataType(const std::string& s) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    if (s == toString(t)) return t;
  }
  throw ConfigError(strCat("unknown dtype \"", s,
                           "\" (want float32, float64, float16, bfloat16, int32 or int64)"));
}

static uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return floatOf(sign | 0x7f800000 | (mant << 13));  // inf / nan
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return floatOf(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t floatToHalf(float f) {
  uint32_t u = bitsOf(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu >= 0x7f800000) {  // inf or nan (keep nan quiet and non-zero)
    return sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 | ((absu >> 13) & 0x3ff) : 0);
  }
  if (absu >= 0x477ff000) return sign | 0x7c00;  // rounds past 65504 -> inf
  if (absu < 0x38800000) {
    // Result is subnormal (or zero): scale so the integer part is the half mantissa,
    // adding 0.5 in float rounds to nearest even through the FPU's own rounding.
    float a = floatOf(absu);
    float scaled = a * 16777216.0f;  // 2^24
    // Round half to even on the integer value.
    uint32_t i = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1))) ++i;
    return static_cast<uint16_t>(sign | i);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t mant = absu & 0x7fffff;
  uint32_t exp = (absu >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // may carry into exp: still right
  return static_cast<uint16_t>(sign | h);
}

float bfloat16ToFloat(uint16_t b) { return floatOf(uint32_t(b) << 16); }

uint16_t floatToBfloat16(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // nan
  uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

void storeElement(DataType t, void* base, size_t i, double v) {
  char* p = static_cast<char*>(base) + i * dataTypeSize(t);
  switch (t) {
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      break;
    case DataType::kFloat16: {
      uint16_t h = floatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t h = floatToBfloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DataType::kInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::kInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
  }
}
double loadElement(DataType t, const void* base, size_t i) {
  const char* p = static_cast<const char*>(base) + i * dataTypeSize(t);
  switch (t) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return halfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bfloat16ToFloat(h);
    }
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
  }
  return NAN;
}

}  // namespace nezha
