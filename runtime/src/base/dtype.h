// Element types: sizes, names and the 16-bit float conversions (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nezha/nezha.hpp"

namespace nezha {

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

// Element i of a buffer of type t as a double, and back (16-bit floats round to nearest even,
// integers truncate). For tests and tools that fill and check buffers of any dtype.
void storeElement(DataType t, void* base, size_t i, double v);
double loadElement(DataType t, const void* base, size_t i);

}  // namespace nezha
