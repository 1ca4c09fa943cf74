// A test double for a rail that turns into a black hole: a relay thread forwarding bytes both
// ways between pairs of loopback TCP connections until blackHole(), after which it keeps every
// connection open and moves nothing more. Each end sees what a switch that drops a rail's frames
// shows it: the link stays up, sends are taken into the kernel's buffers until they fill, and
// nothing arrives. (The test bed makes real ones with iptables; this one fits in-process tests.)
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "base/socket.h"

namespace nezha::testing {

class BlackHoleRelay {
 public:
  BlackHoleRelay() : thread_([this] { run(); }) {}
  ~BlackHoleRelay() {
    stop_ = true;
    thread_.join();
  }
  BlackHoleRelay(const BlackHoleRelay&) = delete;
  BlackHoleRelay& operator=(const BlackHoleRelay&) = delete;

  // A connection from a client to `ip`:`port` (a listening socket the caller accepts on)
  // through the relay. Returns the client's end; the caller accepts the server's end.
  Fd connectThrough(const std::string& ip, int port, Deadline deadline) {
    Fd listener = listenOn(ip, 0, "");
    Fd client = connectTo(ip, localPort(listener.get()), ip, "", deadline, 0, "relay client");
    Fd near = acceptUntil(listener.get(), deadline, 0, "relay");
    Fd far = connectTo(ip, port, ip, "", deadline, 0, "relay server");
    std::lock_guard<std::mutex> lock(mu_);
    ends_.push_back(End{std::move(near)});
    ends_.push_back(End{std::move(far)});
    return client;
  }

  // From its return on nothing moves in either direction; every connection stays open. Waits
  // for the relay to finish the bytes it is forwarding now.
  void blackHole() {
    holed_ = true;
    while (!holeTaken_) std::this_thread::yield();
  }

 private:
  struct End {
    Fd fd;
    bool closed = false;  // its peer closed it: not polled again
  };

  // Ends 2k and 2k + 1 are the two sides of one relayed connection.
  void run() {
    char buf[1 << 16];
    while (!stop_) {
      std::vector<pollfd> fds;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const End& e : ends_) fds.push_back(pollfd{e.closed ? -1 : e.fd.get(), POLLIN, 0});
      }
      if (holed_) holeTaken_ = true;  // no forwarding after this point
      if (fds.empty() || holed_) {
        ::poll(nullptr, 0, 5);
        continue;
      }
      if (::poll(fds.data(), fds.size(), 5) <= 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const int to = ends_[i ^ 1].fd.get();
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          ends_[i].closed = true;
          ::shutdown(to, SHUT_WR);  // pass the close on
          continue;
        }
        for (ssize_t sent = 0; n > 0 && sent < n;) {
          const ssize_t k = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
          if (k <= 0) break;
          sent += k;
        }
      }
    }
  }

  std::mutex mu_;
  std::vector<End> ends_;
  std::atomic<bool> holed_{false};
  std::atomic<bool> holeTaken_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace nezha::testing
