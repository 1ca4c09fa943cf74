// Element types: sizes, names and the 16-bit float conversions (round to nearest even).
#pragma once

#include <cstdint>

#include "nezha/nezha.hpp"

namespace nezha {

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace nezha
