// Algorithm table JSON (NEZHA_ALGO_TABLE): any bytes give an AlgoTable or a ConfigError,
// nothing else; what loads saves in a form that loads again to the same table, and every
// choice it makes is an algorithm of that collective.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/json.h"
#include "nezha/nezha.hpp"
#include "schedule/algo_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string again;
  nezha::AlgoTable t;
  try {
    t = nezha::AlgoTable::parse(text, "fuzz.json");
    again = nezha::dumpJson(t.toJson());
  } catch (const nezha::ConfigError&) {
    return 0;
  }
  try {
    nezha::AlgoTable back = nezha::AlgoTable::parse(again, "again.json");
    if (nezha::dumpJson(back.toJson()) != again) __builtin_trap();
  } catch (const nezha::ConfigError&) {
    __builtin_trap();
  }
  for (const auto& [op, key] : nezha::algoTableOps()) {
    for (int ranks : {1, 2, 3, 8, 1000}) {
      for (size_t bytes : {size_t(0), size_t(4096), size_t(1) << 40}) {
        if (!nezha::implements(t.options().choose(op, bytes, ranks), op)) __builtin_trap();
      }
    }
  }
  return 0;
}
