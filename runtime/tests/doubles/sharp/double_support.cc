#include "double_support.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "transport/sharp/sharp_api.h"

namespace nezha::sharpdouble {

using namespace nezha::sharp;

size_t dtypeSize(int dt) {
  switch (dt) {
    case SHARP_DTYPE_UNSIGNED:
    case SHARP_DTYPE_INT:
    case SHARP_DTYPE_FLOAT:
      return 4;
    case SHARP_DTYPE_UNSIGNED_LONG:
    case SHARP_DTYPE_LONG:
    case SHARP_DTYPE_DOUBLE:
      return 8;
    case SHARP_DTYPE_UNSIGNED_SHORT:
    case SHARP_DTYPE_SHORT:
    case SHARP_DTYPE_FLOAT_SHORT:
    case SHARP_DTYPE_BFLOAT16:
      return 2;
    case SHARP_DTYPE_UINT8:
    case SHARP_DTYPE_INT8:
      return 1;
    default:
      return 0;
  }
}

bool carrierUp(const std::string& iface) {
  std::ifstream in("/sys/class/net/" + iface + "/carrier");
  std::string s;
  return std::getline(in, s) && s == "1";
}

bool parseAggregator(const char* text, sockaddr_in& out) {
  if (text == nullptr) return false;
  std::string s = text;
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  const int port = std::atoi(s.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return false;
  out.sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, s.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

bool waitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool sendAll(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFd(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool recvAll(int fd, void* buf, size_t len, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFd(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

std::string interfaceOfDevice(const std::string& device) {
  const size_t colon = device.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == device.size()) return "";
  const std::string hca = device.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(device.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 255) return "";
  const char* env = std::getenv("NEZHA_RDMA_SYSFS_ROOT");
  const std::filesystem::path net =
      std::filesystem::path(env != nullptr && *env != '\0' ? env : "/sys") / "class/net";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(net, ec)) {
    if (!std::filesystem::exists(entry.path() / "device/infiniband" / hca, ec)) continue;
    long devPort = 0;  // dev_port absent: port 1
    std::ifstream in(entry.path() / "dev_port");
    if (in && !(in >> devPort)) continue;
    if (devPort + 1 == port) return entry.path().filename().string();
  }
  return "";
}

}  // namespace nezha::sharpdouble
