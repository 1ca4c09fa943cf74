// Millisecond detection of a rail's link going away: a thread listens to the kernel's link
// events (netlink RTM_NEWLINK/RTM_DELLINK in this process's network namespace) and reports when
// a watched interface loses carrier (IFF_LOWER_UP cleared, e.g. the switch port went down),
// is set down, or disappears. The communicator then shuts that rail at once instead of waiting
// for the rail's progress deadline.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace nezha {

class LinkWatcher {
 public:
  // `onDown(i)` is called on the watcher thread for each entry i of `ifaces` whose link went
  // down; `onUp(i)` when it has carrier again. Throws Error if the netlink socket cannot open.
  LinkWatcher(std::vector<std::string> ifaces, std::function<void(size_t)> onDown,
              std::function<void(size_t)> onUp);
  ~LinkWatcher();
  LinkWatcher(const LinkWatcher&) = delete;
  LinkWatcher& operator=(const LinkWatcher&) = delete;

 private:
  void loop();
  void handle(const char* buf, size_t len);
  std::vector<std::string> ifaces_;
  std::function<void(size_t)> onDown_, onUp_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nezha
