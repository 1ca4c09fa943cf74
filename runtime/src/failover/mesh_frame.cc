#include "failover/mesh_frame.h"

#include <cstring>

#include "core/error.h"
#include "util/wire.h"

namespace nezha {

namespace {
constexpr uint32_t kMagic = 0x5443'5a4e;  // "NZCT" little-endian

uint32_t readU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}
uint64_t readU64(const std::string& s, size_t at) {
  return static_cast<uint64_t>(readU32(s, at + 4)) << 32 | readU32(s, at);
}
}  // namespace

std::string encodeMeshFrame(uint16_t type, uint16_t rail, uint64_t seq,
                            const std::vector<double>& values) {
  WireWriter w;
  w.u32(kMagic).u32(static_cast<uint32_t>(type) | static_cast<uint32_t>(rail) << 16).u64(seq);
  w.u32(static_cast<uint32_t>(values.size() * sizeof(double)));
  for (double v : values) w.f64(v);
  return w.data();
}

MeshDecode takeMeshFrame(std::string& buffer, MeshFrame& out, std::string& why) {
  if (buffer.size() < kMeshHeaderBytes) return MeshDecode::kNeedMore;
  const uint32_t magic = readU32(buffer, 0), typeRail = readU32(buffer, 4);
  const uint16_t type = typeRail & 0xffff, rail = typeRail >> 16;
  const uint32_t len = readU32(buffer, 16);
  if (magic != kMagic) {
    why = "bad magic";
  } else if (type < kMeshAgree || type > kMeshResend) {
    why = strCat("unknown type ", type);
  } else if (len > kMeshMaxPayload || len % sizeof(double) != 0) {
    why = strCat("payload of ", len, " bytes");
  } else if (type != kMeshAgree && len != 0) {
    why = strCat("type ", type, " carries ", len, " payload bytes");
  }
  if (!why.empty()) return MeshDecode::kBad;
  if (buffer.size() < kMeshHeaderBytes + len) return MeshDecode::kNeedMore;
  out.type = type;
  out.rail = rail;
  out.seq = readU64(buffer, 8);
  out.values.resize(len / sizeof(double));
  if (len > 0) std::memcpy(out.values.data(), buffer.data() + kMeshHeaderBytes, len);
  buffer.erase(0, kMeshHeaderBytes + len);
  return MeshDecode::kFrame;
}

}  // namespace nezha
