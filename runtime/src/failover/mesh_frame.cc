#include "failover/mesh_frame.h"

#include <cstring>

#include "base/error.h"
#include "base/wire.h"

namespace nezha {

namespace {
constexpr uint32_t kMagic = 0x5443'5a4e;  // "NZCT" little-endian
constexpr size_t kAbortFixedBytes = 8;    // origin, kind
constexpr size_t kSilentBytes = 4;        // the watcher

uint32_t readU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}
uint64_t readU64(const std::string& s, size_t at) {
  return static_cast<uint64_t>(readU32(s, at + 4)) << 32 | readU32(s, at);
}

WireWriter header(uint16_t type, uint16_t arg, uint64_t seq, size_t payload) {
  WireWriter w;
  w.u32(kMagic).u32(static_cast<uint32_t>(type) | static_cast<uint32_t>(arg) << 16).u64(seq);
  w.u32(static_cast<uint32_t>(payload));
  return w;
}

// Why the header (type, argument, payload length) cannot start a frame; empty when it can.
std::string checkHeader(uint16_t type, uint16_t arg, uint32_t len) {
  if (type == kMeshAgreeAllToAll) {
    return "an all-to-all agreement frame (the peer runs a libnezha older than the "
           "dissemination rounds)";
  }
  if (type < kMeshRailDown || type > kMeshSilent) return strCat("unknown type ", type);
  if (len > kMeshMaxPayload) return strCat("payload of ", len, " bytes");
  if (type == kMeshStep || type == kMeshResend) {
    if (arg >= kMeshMaxSteps) return strCat("step ", arg, " of type ", type);
  } else if (type != kMeshRailDown && arg != 0) {
    return strCat("type ", type, " with argument ", arg);
  }
  if (type == kMeshStep) {
    if (len % sizeof(double) != 0) return strCat("step payload of ", len, " bytes");
  } else if (type == kMeshAbort) {
    if (len < kAbortFixedBytes || len > kAbortFixedBytes + kMeshMaxAbortText) {
      return strCat("abort payload of ", len, " bytes");
    }
  } else if (type == kMeshSilent) {
    if (len != kSilentBytes) return strCat("silent-peer verdict payload of ", len, " bytes");
  } else if (len != 0) {
    return strCat("type ", type, " carries ", len, " payload bytes");
  }
  return "";
}
}  // namespace

std::string encodeMeshFrame(uint16_t type, uint16_t arg, uint64_t seq) {
  return header(type, arg, seq, 0).data();
}

std::string encodeMeshStep(uint64_t round, uint16_t step, const std::vector<double>& values) {
  WireWriter w = header(kMeshStep, step, round, values.size() * sizeof(double));
  for (double v : values) w.f64(v);
  return w.data();
}

std::string encodeMeshAbort(uint64_t round, uint32_t origin, uint32_t kind,
                            const std::string& why) {
  const std::string text = why.substr(0, kMeshMaxAbortText);
  WireWriter w = header(kMeshAbort, 0, round, kAbortFixedBytes + text.size());
  w.u32(origin).u32(kind).bytes(text.data(), text.size());
  return w.data();
}

std::string encodeMeshSilent(uint64_t peer, uint32_t watcher) {
  WireWriter w = header(kMeshSilent, 0, peer, kSilentBytes);
  w.u32(watcher);
  return w.data();
}

std::string encodeMeshFrame(const MeshFrame& f) {
  switch (f.type) {
    case kMeshStep:
      return encodeMeshStep(f.seq, f.step, f.values);
    case kMeshAbort:
      return encodeMeshAbort(f.seq, f.origin, f.kind, f.why);
    case kMeshSilent:
      return encodeMeshSilent(f.seq, f.origin);
    case kMeshResend:
      return encodeMeshFrame(f.type, f.step, f.seq);
    case kMeshRailDown:
      return encodeMeshFrame(f.type, f.rail, f.seq);
    default:
      return encodeMeshFrame(f.type, 0, f.seq);
  }
}

MeshDecode takeMeshFrame(std::string& buffer, MeshFrame& out, std::string& why) {
  if (buffer.size() < kMeshHeaderBytes) return MeshDecode::kNeedMore;
  const uint32_t magic = readU32(buffer, 0), typeArg = readU32(buffer, 4);
  const uint16_t type = typeArg & 0xffff, arg = typeArg >> 16;
  const uint32_t len = readU32(buffer, 16);
  why = magic != kMagic ? "bad magic" : checkHeader(type, arg, len);
  if (!why.empty()) return MeshDecode::kBad;
  if (buffer.size() < kMeshHeaderBytes + len) return MeshDecode::kNeedMore;
  const char* payload = buffer.data() + kMeshHeaderBytes;
  if (type == kMeshAbort) {
    const uint32_t kind = readU32(buffer, kMeshHeaderBytes + 4);
    if (kind != kMeshAbortRail && kind != kMeshAbortConfig) {
      why = strCat("abort of kind ", kind);
      return MeshDecode::kBad;
    }
    out.origin = readU32(buffer, kMeshHeaderBytes);
    out.kind = kind;
    out.why.assign(payload + kAbortFixedBytes, len - kAbortFixedBytes);
  }
  const uint64_t seq = readU64(buffer, 8);
  if (type == kMeshSilent) {
    // A rank number from the wire indexes the mesh's per-peer state: out of any int's range is
    // garbage here, out of this job's range the mesh's own check.
    const uint32_t watcher = readU32(buffer, kMeshHeaderBytes);
    if (seq > kMeshMaxRank || watcher > kMeshMaxRank) {
      why = strCat("silent-peer verdict on rank ", seq, " by rank ", watcher);
      return MeshDecode::kBad;
    }
    out.origin = watcher;
  }
  out.type = type;
  out.rail = type == kMeshRailDown ? arg : 0;
  out.step = type == kMeshStep || type == kMeshResend ? arg : 0;
  out.seq = seq;
  if (type == kMeshStep) {
    out.values.resize(len / sizeof(double));
    if (len > 0) std::memcpy(out.values.data(), payload, len);
  }
  buffer.erase(0, kMeshHeaderBytes + len);
  return MeshDecode::kFrame;
}

}  // namespace nezha
