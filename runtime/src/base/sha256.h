// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), used only to prove NEZHA_JOB_TOKEN without
// sending it. Small and dependency-free; checked against RFC 4231 vectors in the unit tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace nezha {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t bufLen_ = 0;
  uint64_t totalLen_ = 0;
};

Digest sha256(const void* data, size_t len);
Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);
std::string toHex(const uint8_t* data, size_t len);
// Comparison whose time does not depend on where the inputs differ.
bool constantTimeEqual(const Digest& a, const Digest& b);

}  // namespace nezha
