// The control mesh's frame decoder over a byte stream: frames come out whole or the stream is
// declared bad; the buffer never shrinks by more than what was decoded, and every decoded frame
// (dissemination steps, aborts with their untrusted reason text, silent-peer verdicts, notices)
// encodes back to exactly the bytes it was taken from. The same bytes, as the engine's other
// frame, the per-operation header (op_header.h), plain and signed: decoded, it re-encodes to
// exactly them, and anything else is refused with Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "failover/mesh_frame.h"
#include "failover/op_header.h"
#include "nezha/nezha.hpp"

namespace {
void opHeader(const std::string& bytes) {
  if (bytes.size() < 12) return;
  // The operation the fuzzer's header names, so a header that decodes is reachable.
  uint64_t op = 0;
  for (int i = 11; i >= 4; --i) op = op << 8 | static_cast<uint8_t>(bytes[i]);
  try {
    const nezha::OpHeader h = nezha::decodeOpHeader(bytes, op);
    if (nezha::encodeOpHeader(h) != bytes) __builtin_trap();
  } catch (const nezha::Error&) {
  }
}

// The signed header (a slice's first frames when the caller signed the operation): decoded, it
// re-encodes to exactly the bytes it came from; anything else is refused with Error.
void signedHeader(const std::string& bytes) {
  try {
    const nezha::SignedHeader h = nezha::decodeSignedHeader(bytes);
    if (nezha::encodeSignedHeader(h) != bytes) __builtin_trap();
  } catch (const nezha::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string buffer(reinterpret_cast<const char*>(data), size);
  opHeader(buffer);
  signedHeader(buffer);
  for (;;) {
    nezha::MeshFrame f;
    std::string why;
    const std::string before = buffer;
    const nezha::MeshDecode got = nezha::takeMeshFrame(buffer, f, why);
    if (got != nezha::MeshDecode::kFrame) {
      if (buffer != before) __builtin_trap();
      if (got == nezha::MeshDecode::kBad && why.empty()) __builtin_trap();
      break;
    }
    if (f.step >= nezha::kMeshMaxSteps || f.why.size() > nezha::kMeshMaxAbortText) __builtin_trap();
    // A verdict's ranks index per-peer state in the mesh: never beyond an int.
    if (f.type == nezha::kMeshSilent &&
        (f.seq > nezha::kMeshMaxRank || f.origin > nezha::kMeshMaxRank))
      __builtin_trap();
    const std::string again = nezha::encodeMeshFrame(f);
    if (before.compare(0, again.size(), again) != 0 ||
        before.size() - buffer.size() != again.size())
      __builtin_trap();
  }
  return 0;
}
