// The control mesh's frame decoder over a byte stream: frames come out whole or the stream is
// declared bad; the buffer never shrinks by more than what was decoded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "failover/mesh_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string buffer(reinterpret_cast<const char*>(data), size);
  for (;;) {
    nezha::MeshFrame f;
    std::string why;
    const size_t before = buffer.size();
    const nezha::MeshDecode got = nezha::takeMeshFrame(buffer, f, why);
    if (got != nezha::MeshDecode::kFrame) {
      if (buffer.size() != before) __builtin_trap();
      break;
    }
    const std::string again = nezha::encodeMeshFrame(f.type, f.rail, f.seq, f.values);
    if (before - buffer.size() != again.size()) __builtin_trap();
  }
  return 0;
}
