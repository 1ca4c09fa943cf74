#include "control/control_address.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"
#include "base/params.h"
#include "base/socket.h"

namespace nezha {

ControlAddress resolveControlAddress(const std::string& addr, int localRank,
                                     const std::vector<std::string>& railAddresses,
                                     const std::string& routeTable) {
  const std::string what = strCat("NEZHA_CONTROL_ADDR=\"", addr.substr(0, 128), "\"");
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) throw ConfigError(strCat(what, " is not host:port or :port"));
  ControlAddress out;
  // Port 0 (pick one) is allowed for in-process use; Communicator::controlPort() tells it.
  const int base =
      static_cast<int>(parseInt(addr.substr(colon + 1), "NEZHA_CONTROL_ADDR port", 0, 65535));
  if (base > 0 && base + localRank > 65535) {
    throw ConfigError(
        strCat(what, ": port ", base, " + local rank ", localRank, " is above 65535"));
  }
  out.port = base > 0 ? base + localRank : 0;
  out.host = addr.substr(0, colon);
  if (out.host.empty()) {
    const std::string iface = defaultRouteInterface(routeTable);
    if (iface.empty()) {
      throw ConfigError(strCat(what,
                               ": no default route, so no primary address to bind; give "
                               "the pod's address as host:port"));
    }
    out.host = interfaceAddress(iface, "NEZHA_CONTROL_ADDR");
  }
  if (out.host == "0.0.0.0") {
    throw ConfigError(strCat(what,
                             ": the wildcard address would also listen on the rails; give "
                             "the pod's address (or :port for the default-route interface)"));
  }
  if (std::find(railAddresses.begin(), railAddresses.end(), out.host) != railAddresses.end()) {
    throw ConfigError(strCat(what, ": ", out.host,
                             " is a rail's address; the control endpoint "
                             "belongs on the pod network"));
  }
  return out;
}

}  // namespace nezha
