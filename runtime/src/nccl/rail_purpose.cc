#include "nccl/rail_purpose.h"

#include <cstdint>
#include <cstdio>

#include "base/error.h"
#include "base/sha256.h"

namespace nezha::ncclnet {

std::string encodeRailPurpose(const RailPurpose& p) {
  return strCat("nccl-data dir=send-to-recv rail=", p.rail, " epoch=", p.epoch,
                " nonce=", toHex(p.nonce.data(), p.nonce.size()));
}

std::optional<RailPurpose> decodeRailPurpose(const std::string& purpose) {
  unsigned rail = 0;
  unsigned long epoch = 0;
  char hex[2 * kNonceBytes + 1] = {};
  int used = 0;
  if (std::sscanf(purpose.c_str(),
                  "nccl-data dir=send-to-recv rail=%u epoch=%lu nonce=%32[0-9a-f]%n", &rail, &epoch,
                  hex, &used) != 3 ||
      rail >= kMaxRails || epoch == 0 || epoch > UINT32_MAX) {
    return std::nullopt;
  }
  RailPurpose p;
  p.rail = static_cast<uint16_t>(rail);
  p.epoch = static_cast<uint32_t>(epoch);
  for (size_t i = 0; i < kNonceBytes; ++i) {
    unsigned byte = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) return std::nullopt;
    p.nonce[i] = static_cast<uint8_t>(byte);
  }
  // Canonical form only: one purpose string per (rail, epoch, nonce), nothing trailing.
  if (static_cast<size_t>(used) != purpose.size() || encodeRailPurpose(p) != purpose)
    return std::nullopt;
  return p;
}

}  // namespace nezha::ncclnet
