// What a rail connection of the plugin claims in bootstrap/auth's token handshake. The purpose
// string is bound into both HMACs of the handshake, so the connection's nonce (from NCCL's
// connect handle), the rail, the epoch and the direction a sender proved are the ones the
// receiver acts on: a proof made for one rail, epoch or connection is worthless for another,
// and the nonce alone (which NCCL's bootstrap carries in clear) proves nothing without the job
// token (docs/security.md "NCCL plugin").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nccl/frame.h"

namespace nezha::ncclnet {

struct RailPurpose {
  uint16_t rail = 0;
  uint32_t epoch = 0;  // 1 for the first connection of the rail, +1 for each re-admission
  Nonce nonce{};
};

// "nccl-data dir=send-to-recv rail=<n> epoch=<n> nonce=<32 hex>"
std::string encodeRailPurpose(const RailPurpose& p);
// nullopt unless `purpose` is exactly what encodeRailPurpose writes.
std::optional<RailPurpose> decodeRailPurpose(const std::string& purpose);

}  // namespace nezha::ncclnet
