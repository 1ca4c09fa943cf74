#include "control/control_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/params.h"

namespace nezha {

namespace {
const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    default:
      return "Error";
  }
}

void sendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away; nothing to do
    off += static_cast<size_t>(n);
  }
}
}  // namespace

ControlServer::ControlServer(const std::string& addr, Handler handler)
    : handler_(std::move(handler)) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    throw ConfigError(strCat("NEZHA_CONTROL_ADDR=\"", addr, "\" is not host:port or :port"));
  }
  const std::string host = colon == 0 ? "0.0.0.0" : addr.substr(0, colon);
  // Port 0 (pick one) is allowed for in-process use; Communicator::controlPort() tells it.
  const int port =
      static_cast<int>(parseInt(addr.substr(colon + 1), "NEZHA_CONTROL_ADDR port", 0, 65535));
  try {
    listen_ = listenOn(host, port, "");
  } catch (const Error& e) {
    throw ConfigError(strCat("NEZHA_CONTROL_ADDR=", addr, ": ", e.what()));
  }
  port_ = localPort(listen_.get());
  thread_ = std::thread([this] { loop(); });
}

ControlServer::~ControlServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ControlServer::loop() {
  while (!stop_) {
    pollfd p{listen_.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    Fd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    serve(conn.get());
  }
}

void ControlServer::serve(int fd) {
  // Read the request head (bounded in size and time: a slow or hostile client cannot hold the
  // endpoint for long).
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    if (head.size() > 8192) {
      sendAll(fd, "HTTP/1.0 413 Payload Too Large\r\nConnection: close\r\n\r\n");
      return;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (head.empty()) return;
      break;  // client half-closed after a head without the blank line: parse what we have
    }
    head.append(buf, static_cast<size_t>(n));
  }
  HttpReply reply;
  const size_t eol = head.find_first_of("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t s1 = line.find(' ');
  const size_t s2 = s1 == std::string::npos ? s1 : line.find(' ', s1 + 1);
  if (s1 == std::string::npos || s2 == std::string::npos || line.compare(s2 + 1, 5, "HTTP/") != 0 ||
      s1 == 0 || line[s1 + 1] != '/') {
    reply = {400, "text/plain", "malformed request line\n"};
  } else {
    std::string path = line.substr(s1 + 1, s2 - s1 - 1);
    const size_t q = path.find('?');
    if (q != std::string::npos) path.resize(q);
    try {
      reply = handler_(line.substr(0, s1), path);
    } catch (const std::exception& e) {
      reply = {500, "text/plain", strCat(e.what(), "\n")};
    }
  }
  sendAll(fd, strCat("HTTP/1.0 ", reply.status, " ", reason(reply.status), "\r\nContent-Type: ",
                     reply.contentType, "\r\nContent-Length: ", reply.body.size(),
                     "\r\nConnection: close\r\n\r\n", reply.body));
}

}  // namespace nezha
