// The control endpoint (NEZHA_CONTROL_ADDR): a tiny HTTP/1.0-style server on its own thread.
// One request per connection, answered by a handler; malformed requests get 400 without
// reaching it. Used for GET /status, GET /metrics and POST /rails/{name}/drain|restore.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "util/socket.h"

namespace nezha {

struct HttpReply {
  int status = 200;
  std::string contentType = "application/json";
  std::string body;
};

class ControlServer {
 public:
  using Handler = std::function<HttpReply(const std::string& method, const std::string& path)>;
  // `addr` is "host:port" or ":port" (all addresses). Throws ConfigError naming
  // NEZHA_CONTROL_ADDR if it is malformed or cannot be bound.
  ControlServer(const std::string& addr, Handler handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  int port() const { return port_; }

 private:
  void loop();
  void serve(int fd);
  Handler handler_;
  Fd listen_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nezha
