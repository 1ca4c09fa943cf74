// A client of the control endpoint over real HTTP on loopback (127.0.0.200, on lo but no
// rail's address): raw requests, and requests signed with the test job token's credential the
// way the operator signs them (control/request_auth.h). Shared by the runtime's and the NCCL
// plugin's endpoint tests.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "base/sha256.h"
#include "base/socket.h"
#include "bootstrap/auth.h"
#include "control/request_auth.h"
#include "test_util.h"

namespace nezha::control_client {

inline constexpr uint32_t kControlHost = 0x7f0000c8;  // 127.0.0.200

// A TCP connection to 127.0.0.200:port (-1 if it failed).
inline int connectControl(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(kControlHost);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `raw` to 127.0.0.200:port and returns the whole reply.
inline std::string httpRaw(int port, const std::string& raw) {
  const int fd = connectControl(port);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL), static_cast<ssize_t>(raw.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}
// A request; with a credential, signed now with a fresh nonce (control/request_auth.h).
inline std::string signedHead(const std::string& method, const std::string& path,
                              const std::string& credential) {
  uint8_t nonce[16];
  randomBytes(nonce, sizeof(nonce));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string auth =
      credential.empty()
          ? ""
          : "Authorization: " +
                signControlRequest(credential, method, path, now, toHex(nonce, sizeof(nonce))) +
                "\r\n";
  return method + " " + path + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n";
}
inline std::string http(int port, const std::string& method, const std::string& path,
                        const std::string& credential = "") {
  return httpRaw(port, signedHead(method, path, credential));
}
inline const std::string kCredential = controlCredential(testing::kTestToken);
inline std::string body(const std::string& reply) {
  return reply.substr(reply.find("\r\n\r\n") + 4);
}

}  // namespace nezha::control_client
