// The connect handle NCCL carries from a listener to its peer through its own bootstrap (at
// most NCCL_NET_HANDLE_MAXSIZE = 128 bytes): a random nonce that names the connection in every
// rail's token handshake (the session of transport/peer_mesh.h's purpose binding; the bootstrap
// carries it in clear, so it is no credential by itself), and each rail's listening address. The
// last 16 bytes are the connector's own scratch (NCCL hands the same handle to every connect()
// retry of one connection); the plugin trusts it only after the magic, and only if it names one of
// its own connections in progress.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nezha::ncclnet {

// Bytes that are not a handle this plugin wrote (decodeHandle).
struct FrameError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr size_t kNonceBytes = 16;
constexpr size_t kMaxRails = 8;  // what fits the 128-byte connect handle

using Nonce = std::array<uint8_t, kNonceBytes>;

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
