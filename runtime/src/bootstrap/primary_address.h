// The pod's primary address: where listeners that belong on the pod network bind (the rendezvous
// here, the control endpoint in control/control_address.h), never the wildcard, which would also
// listen on every rail — a network no NetworkPolicy covers (docs/security.md).
#pragma once

#include <string>

namespace nezha {

// The interface holding the IPv4 default route in /proc/net/route's text ("" if none).
std::string defaultRouteInterface(const std::string& routeTable);

// Where rank 0's rendezvous listens, given NEZHA_RENDEZVOUS's host: that host's address when it
// resolves to an address of this network namespace (a headless Service or the pod's own name,
// "localhost" in tests), else the address of the default-route interface (a Service address in
// NEZHA_RENDEZVOUS, which forwards to the pod's primary address). Throws ConfigError naming
// NEZHA_RENDEZVOUS when neither exists.
std::string rendezvousBindAddress(const std::string& host, const std::string& routeTable);

}  // namespace nezha
