// The connect handle NCCL carries from a listener to its peer through its own bootstrap (at
// most NCCL_NET_HANDLE_MAXSIZE = 128 bytes): a random nonce that names the connection in every
// rail's token handshake (nccl/rail_purpose.h; the bootstrap carries it in clear, so it is no
// credential by itself), and each rail's listening address. The last 16 bytes are the
// connector's own scratch (NCCL hands the same handle to every connect() retry of one
// connection); the plugin trusts it only after the magic, and only if it names one of its own
// connections in progress.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nccl/frame.h"

namespace nezha::ncclnet {

struct RailAddress {
  uint32_t ipv4 = 0;  // network byte order, as in sockaddr_in
  uint16_t port = 0;  // host byte order
};

struct ConnectHandle {
  Nonce nonce{};
  std::vector<RailAddress> rails;
};

constexpr size_t kHandleBytes = 128;
constexpr size_t kHandleScratchOffset = 112;  // connector's progress pointer lives here

void encodeHandle(const ConnectHandle& h, void* out);  // fills all 128 bytes
// Throws FrameError when the bytes are not a handle this plugin wrote (magic, rail count).
ConnectHandle decodeHandle(const void* in);
std::string ipv4Text(uint32_t ipv4);

}  // namespace nezha::ncclnet
