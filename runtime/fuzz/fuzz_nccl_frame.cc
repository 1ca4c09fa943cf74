// The NCCL plugin's decoders (frames from a peer, the connect handle from NCCL's bootstrap):
// any bytes either decode to something that re-encodes to the same bytes, or throw FrameError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "nccl/frame.h"
#include "nccl/handle.h"

using namespace nezha::ncclnet;  // NOLINT

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    switch (frameType(body)) {
      case FrameType::kRailDown: {
        const RailDown d = decodeRailDown(body);
        if (encodeRailDown(d).substr(kLengthPrefix) != body) __builtin_trap();
        break;
      }
      case FrameType::kData: {
        if (size < kDataHeaderBody) break;
        const std::string header = body.substr(0, kDataHeaderBody);
        const DataHeader h =
            decodeDataHeader(header, static_cast<uint32_t>(kDataHeaderBody + size % 70000));
        if (h.offset() + h.payload() > h.total && h.total != 0) __builtin_trap();
        break;
      }
      case FrameType::kCts: {
        const Cts c = decodeCts(body);
        if (encodeCts(c).substr(kLengthPrefix) != body) __builtin_trap();
        break;
      }
      case FrameType::kAck: {
        const Ack a = decodeAck(body, size > 1 ? data[1] : 0);
        if (a.rails.size() > kMaxRails) __builtin_trap();
        break;
      }
      case FrameType::kProbe:
        break;
    }
  } catch (const FrameError&) {
  }
  if (size >= kHandleBytes) {
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
  }
  return 0;
}
