// Data-length table JSON: any bytes give a Table or a ConfigError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/json.h"
#include "nezha/nezha.hpp"
#include "schedule/table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string again;
  try {
    nezha::Table t = nezha::Table::fromJson(text, {"r0", "r1"}, "fuzz.json");
    again = nezha::dumpJson(t.toJson());
  } catch (const nezha::ConfigError&) {
    return 0;
  }
  // What loads must save in a form that loads again (nezha-tune's output is a later input).
  try {
    nezha::Table::fromJson(again, {"r0", "r1"}, "again.json");
  } catch (const nezha::ConfigError&) {
    __builtin_trap();
  }
  return 0;
}
