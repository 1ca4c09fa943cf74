#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "base/error.h"

namespace nezha {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string interfaceAddress(const std::string& iface, const std::string& railName) {
  if (if_nametoindex(iface.c_str()) == 0) {
    throw ConfigError(strCat("rail ", railName, ": interface \"", iface,
                             "\" does not exist in this network namespace"));
  }
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw ConfigError(sysError("getifaddrs", errno));
  std::string found;
  for (struct ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (iface != a->ifa_name) continue;
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<struct sockaddr_in*>(a->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
    found = buf;
    break;  // the kernel lists the primary address first
  }
  freeifaddrs(list);
  if (found.empty()) {
    throw ConfigError(strCat("rail ", railName, ": interface \"", iface, "\" has no IPv4 address"));
  }
  return found;
}

static struct sockaddr_in makeAddr(const std::string& ip, int port) {
  struct sockaddr_in sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
    throw ConfigError(strCat("\"", ip, "\" is not an IPv4 address"));
  }
  return sa;
}

// IPv4 literal or a host name (resolved now; DNS may lag behind pod start, so callers retry).
// Returns false with `error` set when the name does not resolve (yet).
static bool resolveAddr(const std::string& host, int port, struct sockaddr_in* out,
                        std::string* error) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1) return true;
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    *error = strCat("cannot resolve \"", host, "\": ", gai_strerror(rc));
    return false;
  }
  out->sin_addr = reinterpret_cast<struct sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return true;
}

static void bindToDevice(int fd, const std::string& iface) {
  if (iface.empty()) return;
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(),
                 static_cast<socklen_t>(iface.size())) != 0) {
    int err = errno;
    throw ConfigError(strCat("SO_BINDTODEVICE to \"", iface, "\" failed: ", std::strerror(err),
                             err == EPERM ? " (needs CAP_NET_RAW)" : ""));
  }
}

Fd listenOn(const std::string& ip, int port, const std::string& iface, int backlog,
            const SocketTuning& tuning) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ConfigError(sysError("socket", errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bindToDevice(fd.get(), iface);
  applyTuning(fd.get(), tuning);  // accepted sockets inherit buffers (window scale is fixed early)
  struct sockaddr_in sa = makeAddr(ip, port);
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)) != 0) {
    throw ConfigError(strCat("cannot listen on ", ip, ":", port, ": ", std::strerror(errno)));
  }
  if (::listen(fd.get(), backlog) != 0) throw ConfigError(sysError("listen", errno));
  return fd;
}

int localPort(int fd) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  NEZHA_ENFORCE(getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len) == 0);
  return ntohs(sa.sin_port);
}

namespace {

std::string firstLineOf(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

int setCongestion(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                    static_cast<socklen_t>(name.size()));
}

}  // namespace

bool isCongestionControlName(const std::string& name) {
  // The kernel's TCP_CA_NAME_MAX is 16 with the NUL.
  return !name.empty() && name.size() < 16 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

void checkCongestionControl(const std::string& name, const std::string& source) {
  if (!isCongestionControlName(name)) {
    throw ConfigError(strCat(source, "=\"", name,
                             "\" is not a congestion control name (want e.g. cubic, reno, dctcp)"));
  }
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ConfigError(sysError("socket", errno));
  if (setCongestion(fd.get(), name) != 0) {
    const int err = errno;
    throw ConfigError(strCat(
        source, "=\"", name, "\": the kernel refuses it (", std::strerror(err),
        "); this kernel has: ", firstLineOf("/proc/sys/net/ipv4/tcp_available_congestion_control"),
        "; a network namespace without CAP_NET_ADMIN may use: ",
        firstLineOf("/proc/sys/net/ipv4/tcp_allowed_congestion_control")));
  }
}

void applyTuning(int fd, const SocketTuning& t) {
  int one = 1;
  // Accepted sockets inherit the listener's congestion control, so listeners get it too.
  if (!t.congestion.empty() && setCongestion(fd, t.congestion) != 0) {
    throw ConfigError(
        strCat("TCP_CONGESTION \"", t.congestion, "\": ", sysError("setsockopt", errno)));
  }
  if (t.noDelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (t.userTimeout.count() > 0) {
    unsigned int ms = static_cast<unsigned int>(t.userTimeout.count());
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  }
  if (t.buffer > 0) {
    int size = static_cast<int>(t.buffer);
    // The *FORCE variants pass net.core.{w,r}mem_max when we hold CAP_NET_ADMIN; without it
    // the plain option is clamped to the sysctl limit, which is the best we may have.
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) != 0) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0) {
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
  }
}

void setControlTimeouts(int fd, std::chrono::milliseconds userTimeout) {
  unsigned int ms = static_cast<unsigned int>(userTimeout.count());
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  int one = 1, idle = std::max(1, static_cast<int>(userTimeout.count() / 2000)), count = 2;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

bool linkHasCarrier(const std::string& iface) {
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  if (!fd.valid() || iface.size() >= sizeof(ifr.ifr_name)) return false;
  std::memcpy(ifr.ifr_name, iface.data(), iface.size());
  if (::ioctl(fd.get(), SIOCGIFFLAGS, &ifr) != 0) return false;
  return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

int msLeft(Deadline deadline) {
  // Rounded up, so a poll never wakes just before its deadline and spins.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

// A connect whose SYN got no answer this long is tried again with a fresh socket, instead of
// waiting out the kernel's SYN retransmits (1 s, then 3 s, 7 s, ...): over a path that drops
// packets until it heals (a black hole, a rail cut and restored) the connection then forms
// within this of the heal, which is what re-admits a rail (failover/readmission.cc). Rails and
// the rendezvous are in one data centre, with round trips far below it.
constexpr std::chrono::milliseconds kSynAnswerWindow{250};

Fd connectTo(const std::string& ip, int port, const std::string& srcIp, const std::string& iface,
             Deadline deadline, int rail, const std::string& what, const SocketTuning& tuning) {
  struct sockaddr_in dst;
  std::string lastError = "timed out";
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    if (!resolveAddr(ip, port, &dst, &lastError)) {
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
      continue;
    }
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) throw RailError(rail, sysError("socket", errno));
    bindToDevice(fd.get(), iface);
    applyTuning(fd.get(), tuning);
    if (!srcIp.empty()) {
      struct sockaddr_in src = makeAddr(srcIp, 0);
      if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&src), sizeof(src)) != 0) {
        throw ConfigError(
            strCat(what, ": cannot bind source address ", srcIp, ": ", std::strerror(errno)));
      }
    }
    setNonBlocking(fd.get(), true);
    int rc = ::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&dst), sizeof(dst));
    int err = rc == 0 ? 0 : errno;
    bool unanswered = false;
    if (err == EINPROGRESS) {
      struct pollfd p = {fd.get(), POLLOUT, 0};
      const int window = static_cast<int>(kSynAnswerWindow.count());
      int n = ::poll(&p, 1, std::max(1, std::min(window, msLeft(deadline))));
      if (n == 1) {
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
        unanswered = true;
      }
    }
    if (err == 0) {
      setNonBlocking(fd.get(), false);
      return fd;
    }
    lastError = std::strerror(err);
    if (Clock::now() >= deadline) break;
    if (unanswered) continue;  // waited a whole window already: a fresh SYN at once
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    if (Clock::now() >= deadline) break;
  }
  throw RailError(rail, strCat(what, ": cannot connect to ", ip, ":", port,
                               " before the deadline: ", lastError));
}

Fd acceptUntil(int listenFd, Deadline deadline, int rail, const std::string& what) {
  while (true) {
    struct pollfd p = {listenFd, POLLIN, 0};
    int n = ::poll(&p, 1, msLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RailError(rail, strCat(what, ": timed out waiting for a connection"));
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
      throw RailError(rail, sysError("accept", errno));
    }
  }
}

void sendAll(int fd, const void* data, size_t len, Deadline deadline, int rail) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw RailError(rail, sysError("send", errno));
    }
    struct pollfd pf = {fd, POLLOUT, 0};
    if (::poll(&pf, 1, msLeft(deadline)) == 0) throw RailError(rail, "send timed out");
  }
}

void recvAll(int fd, void* data, size_t len, Deadline deadline, int rail) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw RailError(rail, "connection closed by peer");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw RailError(rail, sysError("recv", errno));
    }
    struct pollfd pf = {fd, POLLIN, 0};
    if (::poll(&pf, 1, msLeft(deadline)) == 0) throw RailError(rail, "receive timed out");
  }
}

void sendFrame(int fd, const std::string& payload, Deadline deadline, int rail) {
  uint8_t hdr[4];
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) hdr[i] = uint8_t(n >> (8 * i));
  std::string buf(reinterpret_cast<char*>(hdr), 4);
  buf += payload;
  sendAll(fd, buf.data(), buf.size(), deadline, rail);
}

std::string recvFrame(int fd, Deadline deadline, int rail, size_t maxLen) {
  uint8_t hdr[4];
  recvAll(fd, hdr, 4, deadline, rail);
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(hdr[i]) << (8 * i);
  if (n > maxLen) throw RailError(rail, strCat("peer sent a ", n, "-byte frame; limit ", maxLen));
  std::string s(n, '\0');
  recvAll(fd, s.data(), n, deadline, rail);
  return s;
}

void randomBytes(void* out, size_t len) {
  char* p = static_cast<char*>(out);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      NEZHA_ENFORCE(errno == EINTR, "getrandom failed");
      continue;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

}  // namespace nezha
