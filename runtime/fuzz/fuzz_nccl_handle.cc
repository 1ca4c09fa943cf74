// The NCCL plugin's connect handle, as it arrives from NCCL's unauthenticated bootstrap: any
// bytes either decode to a handle that re-encodes to the same bytes, or throw FrameError.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nccl/handle.h"

using namespace nezha::ncclnet;  // NOLINT

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHandleBytes) return 0;
  try {
    const ConnectHandle h = decodeHandle(data);
    uint8_t again[kHandleBytes];
    encodeHandle(h, again);
    if (std::memcmp(again, data, kHandleScratchOffset) != 0 &&
        std::memcmp(again, data, 4 + kNonceBytes + 1 + 6 * h.rails.size()) != 0) {
      __builtin_trap();
    }
  } catch (const FrameError&) {
  }
  return 0;
}
