// The engine's per-operation header: a fixed 20-byte little-endian frame (magic "NZOH", the
// operation number, one 64-bit value) that a rank sends its peer at the start of an
// operation's slice, ahead of the data, on the same rail. It lets an entry point carry what the
// peer must know about this operation (the NCCL plugin: the size sent and the room posted,
// nccl/engine_link.h) in the operation itself instead of an operation of its own, and the
// operation number lets each end check that the peer is in the same operation.
// Its signed form ("NZOS": the operation number and the caller's fixed-size signature of the
// operation) is what every rank sends every peer of a slice's rail ahead of its data when the
// caller signed the operation (Communicator::signNextOp, failover/signed_channel.h).
// Pure functions, so the decoders can be fuzzed (runtime/fuzz/fuzz_mesh_frame.cc feeds them too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nezha {

inline constexpr size_t kOpHeaderBytes = 4 + 8 + 8;

struct OpHeader {
  uint64_t op = 0;     // the operation this header belongs to (FailoverEngine::beginOp)
  uint64_t value = 0;  // what the entry point carries
};

std::string encodeOpHeader(const OpHeader& header);
// `bytes` must be kOpHeaderBytes long. Throws Error naming the field that is wrong: the magic
// (not a header: the ends' streams are out of step) or the operation (the peer is in operation
// `header.op`, this rank in `expectedOp`).
OpHeader decodeOpHeader(const std::string& bytes, uint64_t expectedOp);

// The signed header: the caller's signature, zero-padded to this size (Communicator::signNextOp
// refuses a longer one), after the magic and the operation number.
inline constexpr size_t kOpSignatureBytes = 32;
inline constexpr size_t kSignedHeaderBytes = 4 + 8 + kOpSignatureBytes;

struct SignedHeader {
  uint64_t op = 0;        // the sender's operation number (FailoverEngine::beginOp)
  std::string signature;  // kOpSignatureBytes long
};

// `signature` must be kOpSignatureBytes long.
std::string encodeSignedHeader(const SignedHeader& header);
// `bytes` must be kSignedHeaderBytes long. Throws Error naming the field that is wrong: the
// magic (not a signed header: the ends' streams are out of step) or the length. The operation
// number is returned, not checked: a peer in another operation is a mismatch the caller names
// with the signatures (signed_channel.h).
SignedHeader decodeSignedHeader(const std::string& bytes);

}  // namespace nezha
