// The RDMA rail's records as a peer sends them: the queue pair address (over the bootstrap
// connection) and the receive advertisement of direct placement (into the staging ring). Each
// decode either throws RailError or yields values in range that re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nezha/nezha.hpp"
#include "transport/verbs/verbs_device.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string wire(reinterpret_cast<const char*>(data), size);
  try {
    const nezha::QpAddress a = nezha::QpAddress::decode(wire, 0, "fuzz");
    if (a.encode() != wire || a.slots == 0 || a.slotBytes == 0) __builtin_trap();
  } catch (const nezha::RailError&) {
  }
  try {
    const nezha::DirectAdvert a = nezha::DirectAdvert::decode(wire, 0, "fuzz");
    if (a.encode() != wire || a.len == 0 || a.addr + a.len < a.addr) __builtin_trap();
  } catch (const nezha::RailError&) {
  }
  return 0;
}
