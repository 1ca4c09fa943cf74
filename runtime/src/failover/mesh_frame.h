// The control mesh's wire format (control_mesh.h), as pure functions so the decoder can be
// fuzzed: a 20-byte little-endian header (magic "NZCT", type, a 16-bit argument, sequence,
// payload bytes) and a payload: doubles (a dissemination step), or an abort's origin rank,
// kind and reason, or a silent-peer verdict's watcher rank, or nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nezha {

enum MeshFrameType : uint16_t {
  // Type 1 was the all-to-all agreement round of older libnezha (before dissemination). Refused as
  // a
  // bad frame ("older libnezha"): a rank speaking it would never send the dissemination steps
  // this build waits for, so its peers drop the connection at once instead of hanging.
  kMeshAgreeAllToAll = 1,
  kMeshRailDown = 2,  // "I lost this rail's link" (argument = rail, sequence = its generation)
  kMeshWhere = 3,     // "which operation are you in?"
  kMeshHere = 4,      // the answer (sequence = operations started)
  kMeshResend = 5,    // "send me step <argument> of round <sequence> again"
  kMeshStep = 6,      // step <argument> of round <sequence>: the sender's running max (doubles)
  kMeshAbort = 7,     // "round <sequence> failed": origin rank, kind, why (see MeshAbortKind)
  // "rank <sequence> is unreachable": heard on no rail for the peer silence by the rank that
  // watches it (payload: that watcher's rank, u32). Flooded over the heartbeat neighbours.
  kMeshSilent = 8,
};

// Why a round was aborted, so every rank throws the same kind of error as the rank that failed it.
enum MeshAbortKind : uint32_t {
  kMeshAbortRail = 1,    // a peer unreachable or silent, or the round's timeout (RailError)
  kMeshAbortConfig = 2,  // ranks sent different lengths (ConfigError)
};

struct MeshFrame {
  uint16_t type = 0;
  uint16_t rail = 0;  // kMeshRailDown only
  uint16_t step = 0;  // kMeshStep and kMeshResend only
  uint64_t seq = 0;
  std::vector<double> values;  // kMeshStep
  uint32_t origin =
      0;              // kMeshAbort: the rank that failed the round first; kMeshSilent: the watcher
  uint32_t kind = 0;  // kMeshAbort: a MeshAbortKind
  std::string why;    // kMeshAbort: that rank's error, untrusted bytes
};

inline constexpr size_t kMeshHeaderBytes = 4 + 2 + 2 + 8 + 4;
inline constexpr size_t kMeshMaxPayload = 1 << 20;
// A round has ceil(log2 N) steps; 63 covers any world size a 64-bit rank count can name.
inline constexpr uint16_t kMeshMaxSteps = 63;
// An abort's reason text is cut to this many bytes when encoded; longer is a bad frame.
inline constexpr size_t kMeshMaxAbortText = 1024;
// Ranks are ints: a verdict naming a rank (or watcher) above this is a bad frame, whatever the
// world size (the mesh checks the world size itself).
inline constexpr uint64_t kMeshMaxRank = 0x7fff'ffff;

// Every frame type from its MeshFrame (fields that type does not carry are ignored).
std::string encodeMeshFrame(const MeshFrame& frame);
// Frames with no payload but the argument (RAIL_DOWN, WHERE, HERE, RESEND).
std::string encodeMeshFrame(uint16_t type, uint16_t arg, uint64_t seq);
std::string encodeMeshStep(uint64_t round, uint16_t step, const std::vector<double>& values);
std::string encodeMeshAbort(uint64_t round, uint32_t origin, uint32_t kind, const std::string& why);
// "rank `peer` is unreachable", as judged by `watcher` (kMeshSilent).
std::string encodeMeshSilent(uint64_t peer, uint32_t watcher);

enum class MeshDecode { kFrame, kNeedMore, kBad };
// Takes the first whole frame off the front of `buffer` into `out`. kBad (with `why`) means the
// stream is garbage and the connection must be dropped; the buffer is then left as it was.
// Bounds checked here: type, argument (a rail of RAIL_DOWN, a step < kMeshMaxSteps of STEP and
// RESEND, 0 elsewhere), payload size per type, abort kind, a verdict's ranks <= kMeshMaxRank.
// Whether a step, round, origin or named rank fits this job is the mesh's check (it knows the
// world size).
MeshDecode takeMeshFrame(std::string& buffer, MeshFrame& out, std::string& why);

}  // namespace nezha
