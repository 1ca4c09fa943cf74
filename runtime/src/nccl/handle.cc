#include "nccl/handle.h"

#include <arpa/inet.h>

#include <cstring>

#include "base/error.h"

namespace nezha::ncclnet {

namespace {
constexpr uint8_t kMagic[4] = {'N', 'Z', 'H', '1'};
constexpr size_t kHeader = 4 + kNonceBytes + 1;
constexpr size_t kPerRail = 6;
static_assert(kHeader + kMaxRails * kPerRail <= kHandleScratchOffset, "handle overflows");
}  // namespace

void encodeHandle(const ConnectHandle& h, void* out) {
  NEZHA_ENFORCE(!h.rails.empty() && h.rails.size() <= kMaxRails);
  auto* p = static_cast<uint8_t*>(out);
  std::memset(p, 0, kHandleBytes);
  std::memcpy(p, kMagic, 4);
  std::memcpy(p + 4, h.nonce.data(), kNonceBytes);
  p[4 + kNonceBytes] = static_cast<uint8_t>(h.rails.size());
  uint8_t* q = p + kHeader;
  for (const auto& r : h.rails) {
    std::memcpy(q, &r.ipv4, 4);
    q[4] = static_cast<uint8_t>(r.port >> 8);
    q[5] = static_cast<uint8_t>(r.port & 0xff);
    q += kPerRail;
  }
}

ConnectHandle decodeHandle(const void* in) {
  const auto* p = static_cast<const uint8_t*>(in);
  if (std::memcmp(p, kMagic, 4) != 0) {
    throw FrameError("connect handle: bad magic (written by another NCCL net plugin?)");
  }
  ConnectHandle h;
  std::memcpy(h.nonce.data(), p + 4, kNonceBytes);
  const size_t n = p[4 + kNonceBytes];
  if (n == 0 || n > kMaxRails) {
    throw FrameError(strCat("connect handle: ", n, " rails (want 1..", kMaxRails, ")"));
  }
  const uint8_t* q = p + kHeader;
  for (size_t i = 0; i < n; ++i, q += kPerRail) {
    RailAddress r;
    std::memcpy(&r.ipv4, q, 4);
    r.port = static_cast<uint16_t>(q[4] << 8 | q[5]);
    if (r.port == 0) throw FrameError(strCat("connect handle: rail ", i, " has port 0"));
    h.rails.push_back(r);
  }
  return h;
}

std::string ipv4Text(uint32_t ipv4) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ipv4;
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

}  // namespace nezha::ncclnet
