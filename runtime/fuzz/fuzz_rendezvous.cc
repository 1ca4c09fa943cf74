// Rendezvous wire decoders: a registration (what any token holder may send the server) and the
// server's answer (what a rank reads). Malformed input is an Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap/rendezvous.h"
#include "nezha/nezha.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    nezha::RankInfo info = nezha::decodeRankInfo(bytes);
    // A registration that decodes encodes back to the same bytes.
    if (nezha::encodeRankInfo(info) != bytes) __builtin_trap();
  } catch (const nezha::Error&) {
  }
  try {
    const int world = size > 0 ? 1 + data[0] % 4 : 1;
    nezha::JobTable t = nezha::decodeJobTable(bytes, world, 2);
    if (static_cast<int>(t.ranks.size()) != world) __builtin_trap();
  } catch (const nezha::Error&) {
  }
  return 0;
}
