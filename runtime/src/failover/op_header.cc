#include "failover/op_header.h"

#include "base/error.h"
#include "base/wire.h"

namespace nezha {

namespace {
constexpr uint32_t kMagic = 0x484f'5a4e;        // "NZOH" little-endian
constexpr uint32_t kSignedMagic = 0x534f'5a4e;  // "NZOS" little-endian

// Reads the magic; a frame that is not `what` ("NZOH"/"NZOS") means the two ends' streams are
// out of step.
void expectMagic(WireReader& r, uint32_t want, const char* frame, const char* what) {
  const uint32_t magic = r.u32();
  if (magic != want) {
    throw Error(strCat(frame, ": magic ", magic, " is not \"", what,
                       "\" (the peer's stream is out of step with this rank's)"));
  }
}
}  // namespace

std::string encodeOpHeader(const OpHeader& header) {
  WireWriter w;
  w.u32(kMagic).u64(header.op).u64(header.value);
  return w.data();
}

OpHeader decodeOpHeader(const std::string& bytes, uint64_t expectedOp) {
  WireReader r(bytes, "operation header");
  expectMagic(r, kMagic, "operation header", "NZOH");
  OpHeader h;
  h.op = r.u64();
  h.value = r.u64();
  r.finish();
  if (h.op != expectedOp) {
    throw Error(strCat("operation header: op ", h.op, " from the peer, but this rank is in op ",
                       expectedOp, " (the two ends ran different operations)"));
  }
  return h;
}

std::string encodeSignedHeader(const SignedHeader& header) {
  if (header.signature.size() != kOpSignatureBytes) {
    throw EnforceError(strCat("signed operation header: signature of ", header.signature.size(),
                              " bytes, not ", kOpSignatureBytes));
  }
  WireWriter w;
  w.u32(kSignedMagic).u64(header.op).bytes(header.signature.data(), kOpSignatureBytes);
  return w.data();
}

SignedHeader decodeSignedHeader(const std::string& bytes) {
  WireReader r(bytes, "signed operation header");
  expectMagic(r, kSignedMagic, "signed operation header", "NZOS");
  SignedHeader h;
  h.op = r.u64();
  h.signature.resize(kOpSignatureBytes);
  r.bytes(h.signature.data(), kOpSignatureBytes);
  r.finish();
  return h;
}

}  // namespace nezha
