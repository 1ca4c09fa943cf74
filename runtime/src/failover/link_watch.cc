#include "failover/link_watch.h"

#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "nezha/nezha.hpp"

namespace nezha {

LinkWatcher::LinkWatcher(std::vector<std::string> ifaces, std::function<void(size_t)> onDown,
                         std::function<void(size_t)> onUp)
    : ifaces_(std::move(ifaces)), onDown_(std::move(onDown)), onUp_(std::move(onUp)) {
  fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) throw Error(strCat("link watch: netlink socket: ", std::strerror(errno)));
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = RTMGRP_LINK;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd_);
    throw Error(strCat("link watch: netlink bind: ", std::strerror(err)));
  }
  thread_ = std::thread([this] { loop(); });
}

LinkWatcher::~LinkWatcher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void LinkWatcher::loop() {
  alignas(nlmsghdr) char buf[16384];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    // Short timeout only to notice stop_; events themselves wake the poll at once.
    if (::poll(&p, 1, 100) <= 0) continue;
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;  // EAGAIN, or ENOBUFS after an overflow (next event resyncs)
      handle(buf, static_cast<size_t>(n));
    }
  }
}

void LinkWatcher::handle(const char* buf, size_t len) {
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
    const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
    std::string name;
    int alen = static_cast<int>(IFLA_PAYLOAD(h));
    for (auto* a = IFLA_RTA(ifi); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
      if (a->rta_type == IFLA_IFNAME) name = static_cast<const char*>(RTA_DATA(a));
    }
    const bool up = h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                    (ifi->ifi_flags & IFF_LOWER_UP);
    for (size_t i = 0; i < ifaces_.size(); ++i) {
      if (ifaces_[i] != name) continue;
      if (up) {
        if (onUp_) onUp_(i);
      } else if (onDown_) {
        onDown_(i);
      }
    }
  }
}

}  // namespace nezha
