#include "control/control_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "base/error.h"

namespace nezha {

namespace {
const char* statusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}
}  // namespace

namespace {
std::string sourceIp(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) {
    return "?";
  }
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return ip;
}
}  // namespace

struct ControlServer::Conn {
  Fd fd;
  std::string source;  // the peer's IP: the per-source cap
  Clock::time_point deadline;
  std::string in, out;
  size_t sent = 0;
  bool answered = false;
};

ControlServer::ControlServer(const std::string& host, int port, Handler handler)
    : handler_(std::move(handler)) {
  try {
    listen_ = listenOn(host, port, "");
  } catch (const Error& e) {
    throw ConfigError(strCat("NEZHA_CONTROL_ADDR (", host, ":", port, "): ", e.what()));
  }
  setNonBlocking(listen_.get(), true);
  port_ = localPort(listen_.get());
  thread_ = std::thread([this] { loop(); });
}

ControlServer::~ControlServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ControlServer::rejected(const char* why) {
  ++rejected_;
  if (!logged_) {
    logged_ = true;
    std::fprintf(stderr,
                 "nezha: control endpoint: closed a connection (%s); later ones are counted in "
                 "nezha_runtime_control_rejected_connections_total, not logged\n",
                 why);
  }
}

void ControlServer::acceptAll() {
  for (;;) {
    Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;
    auto c = std::make_unique<Conn>();
    c->fd = std::move(fd);
    c->deadline = Clock::now() + kRequestDeadline;
    c->source = sourceIp(c->fd.get());
    if (!makeRoom(c->source)) {
      // Still answered (the 503 fits any socket buffer), so a client learns why.
      answer(*c, {503, "text/plain", "too many open connections to the control endpoint\n", ""});
      (void)::send(c->fd.get(), c->out.data(), c->out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      rejected("too many connections");
      continue;
    }
    conns_.push_back(std::move(c));
  }
}

bool ControlServer::makeRoom(const std::string& source) {
  const size_t fromSource = static_cast<size_t>(std::count_if(
      conns_.begin(), conns_.end(), [&](const auto& c) { return c->source == source; }));
  const bool sourceFull = fromSource >= kMaxPerSource;
  if (!sourceFull && conns_.size() < kMaxConnections) return true;
  // conns_ is in arrival order: the first idle match is the oldest.
  for (auto it = conns_.begin(); it != conns_.end(); ++it) {
    const Conn& c = **it;
    if (c.answered || !c.in.empty() || (sourceFull && c.source != source)) continue;
    rejected("evicted: sent nothing while the connection table was full");
    conns_.erase(it);
    return true;
  }
  return false;
}

void ControlServer::answer(Conn& c, const HttpReply& reply) {
  c.answered = true;
  c.out = strCat("HTTP/1.0 ", reply.status, " ", statusText(reply.status),
                 "\r\nContent-Type: ", reply.contentType, "\r\nContent-Length: ", reply.body.size(),
                 "\r\n", reply.extraHeaders, "Connection: close\r\n\r\n", reply.body);
  c.sent = 0;
}

bool ControlServer::step(Conn& c) {
  if (!c.answered) {
    char buf[2048];
    for (;;) {
      ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      if (n < 0 || (n == 0 && c.in.empty())) {
        rejected("closed without a request");
        return true;
      }
      if (n == 0) {
        // Half-closed after a head without its blank line: judge what arrived.
        c.in += "\r\n\r\n";
        break;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > kMaxHttpHead + 4) break;
    }
    const size_t end = httpHeadEnd(c.in);
    if (end == std::string::npos && c.in.size() <= kMaxHttpHead) return false;  // wait for more
    const HttpRequest req = parseHttpHead(end == std::string::npos ? c.in : c.in.substr(0, end));
    if (req.error != 0) {
      rejected("malformed request");
      answer(c, {req.error, "text/plain", req.reason + "\n", ""});
    } else {
      try {
        answer(c, handler_(req));
      } catch (const std::exception& e) {
        answer(c, {500, "text/plain", strCat(e.what(), "\n"), ""});
      }
    }
  }
  while (c.sent < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) return true;  // the client went away
    c.sent += static_cast<size_t>(n);
  }
  return true;
}

void ControlServer::loop() {
  std::vector<pollfd> pfds;
  while (!stop_) {
    pfds.assign(1, pollfd{listen_.get(), POLLIN, 0});
    for (const auto& c : conns_) {
      pfds.push_back(pollfd{c->fd.get(), static_cast<short>(c->answered ? POLLOUT : POLLIN), 0});
    }
    // Wake up at least every 100 ms to notice stop_ and expired connections.
    const int n = ::poll(pfds.data(), pfds.size(), 100);
    if (n < 0 && errno != EINTR) continue;
    for (size_t i = 0; i < conns_.size(); ++i) {
      if (pfds[i + 1].revents != 0 && step(*conns_[i])) conns_[i].reset();
    }
    const auto now = Clock::now();
    for (auto& c : conns_) {
      if (c && now >= c->deadline) {
        rejected(c->answered ? "too slow to read its answer" : "no request within 2 s");
        c.reset();
      }
    }
    conns_.erase(std::remove(conns_.begin(), conns_.end(), nullptr), conns_.end());
    if (pfds[0].revents != 0) acceptAll();
  }
}

}  // namespace nezha
