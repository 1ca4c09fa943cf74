// The control endpoint's HTTP server, on its own thread: one request per connection, every open
// connection progressing at once on non-blocking sockets, each under its own 2 s deadline and
// the 8 KiB head limit, so idle, slow or hostile clients never delay a GET from the operator or
// Prometheus. Malformed requests get their 4xx without reaching the handler. What the endpoint
// answers (and who may change what) is the handler's business: comm/control_status.cc.
//
// Against floods of idle sockets (docs/security.md "Control endpoint"): one source IP holds at
// most kMaxPerSource connections, and when a limit is reached the oldest connection that has
// sent nothing is evicted to make room; only when every open connection is mid-request is a
// newcomer refused (503), so idle sockets never keep the operator's drain out.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "control/http_request.h"

namespace nezha {

struct HttpReply {
  int status = 200;
  std::string contentType = "application/json";
  std::string body;
  std::string extraHeaders;  // whole lines, each ending in \r\n (e.g. WWW-Authenticate)
};

class ControlServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest& request)>;
  // Binds host:port now (port 0 = any). Throws ConfigError naming NEZHA_CONTROL_ADDR.
  ControlServer(const std::string& host, int port, Handler handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  int port() const { return port_; }
  // Connections closed without a valid request (idle past the deadline, evicted, garbage, too
  // many).
  uint64_t rejectedConnections() const { return rejected_.load(); }

  static constexpr std::chrono::milliseconds kRequestDeadline{2000};
  static constexpr size_t kMaxConnections = 64;
  static constexpr size_t kMaxPerSource = 16;

 private:
  struct Conn;
  void loop();
  void acceptAll();
  // Evicts the oldest connection that has sent nothing (of `source` when it is at its cap);
  // false when none may go.
  bool makeRoom(const std::string& source);
  // Moves one connection as far as its socket allows; true when it is finished.
  bool step(Conn& c);
  void answer(Conn& c, const HttpReply& reply);
  void rejected(const char* why);

  Handler handler_;
  Fd listen_;
  int port_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;  // loop thread only
  std::atomic<uint64_t> rejected_{0};
  bool logged_ = false;  // loop thread only: the first rejection is logged, later ones counted
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nezha
