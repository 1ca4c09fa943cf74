// What the TCP sockets of this test process run: how tests check that a setting really reached
// the kernel (each ctest case runs in its own process, so only its own sockets count).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>

namespace nezha::testing {

// IPv4 TCP sockets of this process whose congestion control (TCP_CONGESTION) is `cc`.
inline int tcpSocketsRunning(const std::string& cc) {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    int type = 0, domain = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_INET) continue;
    char name[16] = {};
    len = sizeof name;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0 && cc == name) ++count;
  }
  return count;
}

}  // namespace nezha::testing
