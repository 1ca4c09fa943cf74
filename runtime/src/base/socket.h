// Thin POSIX socket layer: an owning fd, interface address lookup, rail-bound listen/connect
// and deadline-bounded blocking I/O used during setup (data transfer has its own poll loop in
// tcp_channel.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nezha {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

// The first IPv4 address of `iface`. Throws ConfigError if the interface is missing or has none.
std::string interfaceAddress(const std::string& iface, const std::string& railName);

struct SocketTuning {
  size_t buffer = 0;  // SO_SNDBUF/SO_RCVBUF; 0 = leave the kernel's autotuning alone
  bool noDelay = true;
  std::chrono::milliseconds userTimeout{0};  // TCP_USER_TIMEOUT; 0 = the kernel's default
  std::string congestion;                    // TCP_CONGESTION; "" = the kernel's default
};

// Throws ConfigError, naming `source` (the setting it came from), unless a TCP socket in this
// network namespace may use congestion control `name`: the kernel offers only the algorithms it
// has, and a namespace only those in net.ipv4.tcp_allowed_congestion_control without
// CAP_NET_ADMIN.
void checkCongestionControl(const std::string& name, const std::string& source);
// The name's form only (what checkCongestionControl tests before asking the kernel): 1-15 of
// [a-z0-9_], the kernel's TCP_CA_NAME_MAX.
bool isCongestionControlName(const std::string& name);

// Listening socket bound to `ip:port` and, when iface is non-empty, to the device itself so
// its traffic can never be routed through another NIC. port 0 picks a free port.
Fd listenOn(const std::string& ip, int port, const std::string& iface, int backlog = 128,
            const SocketTuning& tuning = SocketTuning{});
int localPort(int fd);

// Connects from `srcIp` on `iface` (both optional) to ip:port, retrying refused/unreachable
// attempts until the deadline. Throws RailError(rail) with the last errno on timeout.
Fd connectTo(const std::string& ip, int port, const std::string& srcIp, const std::string& iface,
             Deadline deadline, int rail, const std::string& what,
             const SocketTuning& tuning = SocketTuning{});
// Accepts one connection or throws RailError(rail) when the deadline passes.
Fd acceptUntil(int listenFd, Deadline deadline, int rail, const std::string& what);

// Throws ConfigError if the congestion control cannot be set (checkCongestionControl() says why
// up front); the other options are best effort.
void applyTuning(int fd, const SocketTuning& t);
// Control connections: TCP_USER_TIMEOUT plus fast keepalive, so a connection over a cut rail
// (or to a host that vanished) is dropped by the kernel within about `userTimeout`.
void setControlTimeouts(int fd, std::chrono::milliseconds userTimeout);
// True when `iface` is up and has carrier (IFF_UP and IFF_RUNNING); false if it is missing.
bool linkHasCarrier(const std::string& iface);
void setNonBlocking(int fd, bool on);
// Milliseconds until `deadline` for poll(), rounded up; 0 once it passed.
int msLeft(Deadline deadline);

// Blocking I/O bounded by a deadline; throw RailError(rail) on timeout, EOF or error.
void sendAll(int fd, const void* data, size_t len, Deadline deadline, int rail);
void recvAll(int fd, void* data, size_t len, Deadline deadline, int rail);

// Length-prefixed frames (u32 little-endian length, then payload).
void sendFrame(int fd, const std::string& payload, Deadline deadline, int rail);
std::string recvFrame(int fd, Deadline deadline, int rail, size_t maxLen = 1 << 20);

void randomBytes(void* out, size_t len);

}  // namespace nezha
