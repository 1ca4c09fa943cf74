// The control mesh's wire format (control_mesh.h), as pure functions so the decoder can be
// fuzzed: a 20-byte little-endian header (magic "NZCT", type, rail, sequence, payload bytes)
// and a payload of doubles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nezha {

enum MeshFrameType : uint16_t {
  kMeshAgree = 1,     // an agreement round's values (sequence = round)
  kMeshRailDown = 2,  // "I lost this rail's link" (sequence = the rail's generation)
  kMeshWhere = 3,     // "which operation are you in?"
  kMeshHere = 4,      // the answer (sequence = operations started)
  kMeshResend = 5,    // "send me round <sequence> again"
};

struct MeshFrame {
  uint16_t type = 0, rail = 0;
  uint64_t seq = 0;
  std::vector<double> values;
};

inline constexpr size_t kMeshHeaderBytes = 4 + 2 + 2 + 8 + 4;
inline constexpr size_t kMeshMaxPayload = 1 << 20;

std::string encodeMeshFrame(uint16_t type, uint16_t rail, uint64_t seq,
                            const std::vector<double>& values);

enum class MeshDecode { kFrame, kNeedMore, kBad };
// Takes the first whole frame off the front of `buffer` into `out`. kBad (with `why`) means the
// stream is garbage and the connection must be dropped; the buffer is then left as it was.
MeshDecode takeMeshFrame(std::string& buffer, MeshFrame& out, std::string& why);

}  // namespace nezha
