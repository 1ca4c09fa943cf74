#include "base/congestion_control.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <fstream>

#include "base/error.h"
#include "base/socket.h"

namespace nezha {

namespace {

// Whether a fresh TCP socket here may run `name`: the same test the rail sockets face.
bool usable(const char* name) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ConfigError(sysError("socket", errno));
  return setsockopt(fd.get(), IPPROTO_TCP, TCP_CONGESTION, name,
                    static_cast<socklen_t>(std::char_traits<char>::length(name))) == 0;
}

}  // namespace

std::string hostCongestionControl() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  std::getline(f, name);
  return name.empty() ? "unknown" : name;
}

std::string CongestionChoice::describe() const {
  if (setting == "host") return strCat(algorithm, " (host default)");
  if (setting == "auto")
    return strCat(algorithm, " (auto; host default ", hostCongestionControl(), ")");
  return strCat(algorithm, " (set)");
}

CongestionChoice resolveCongestionControl(const std::string& setting, const std::string& source) {
  CongestionChoice c;
  c.setting = setting;
  if (setting == "host") {
    c.algorithm = hostCongestionControl();
    return c;
  }
  if (setting == "auto") {
    for (const char* name : kAutoCongestionControls) {
      if (usable(name)) {
        c.algorithm = c.socketOption = name;
        return c;
      }
    }
    // reno is built into every kernel and always allowed, so this takes a custom kernel.
    std::string tried;
    for (const char* name : kAutoCongestionControls)
      tried += strCat(tried.empty() ? "" : ", ", name);
    throw ConfigError(
        strCat(source, "=auto: this network namespace may use none of ", tried,
               " (want host, or a name from net.ipv4.tcp_allowed_congestion_control)"));
  }
  if (setting.empty()) {
    throw ConfigError(strCat(source, " is empty (want auto, host, or a congestion control name)"));
  }
  checkCongestionControl(setting, source);
  c.algorithm = c.socketOption = setting;
  return c;
}

}  // namespace nezha
