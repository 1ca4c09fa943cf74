#include "bootstrap/primary_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "base/socket.h"

namespace nezha {

namespace {
std::string ipString(const sockaddr* sa) {
  char buf[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  return buf;
}

std::set<std::string> localAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      out.insert(ipString(a->ifa_addr));
    }
  }
  ::freeifaddrs(list);
  return out;
}

// Every IPv4 address `host` resolves to (none if it does not resolve).
std::vector<std::string> resolveAll(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) out.push_back(ipString(a->ai_addr));
  ::freeaddrinfo(res);
  return out;
}
}  // namespace

std::string defaultRouteInterface(const std::string& routeTable) {
  std::istringstream in(routeTable);
  std::string line;
  std::getline(in, line);  // header: Iface Destination Gateway Flags ...
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string iface, dest, gateway, flags;
    if (!(f >> iface >> dest >> gateway >> flags)) continue;
    // Destination 0 is the default route; flag 0x1 (RTF_UP) must be set.
    if (dest == "00000000" && (std::strtoul(flags.c_str(), nullptr, 16) & 0x1) != 0) return iface;
  }
  return "";
}

std::string rendezvousBindAddress(const std::string& host, const std::string& routeTable) {
  const std::set<std::string> local = localAddresses();
  for (const std::string& ip : resolveAll(host)) {
    if (ip != "0.0.0.0" && local.count(ip)) return ip;
  }
  const std::string iface = defaultRouteInterface(routeTable);
  if (iface.empty()) {
    throw ConfigError(strCat("NEZHA_RENDEZVOUS host \"", host.substr(0, 128),
                             "\" is not an address of this pod and there is no default route, so "
                             "rank 0 has no primary address to listen on; name rank 0's own "
                             "address or hostname"));
  }
  return interfaceAddress(iface, "NEZHA_RENDEZVOUS");
}

}  // namespace nezha
