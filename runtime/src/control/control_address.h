// Where the control endpoint listens: NEZHA_CONTROL_ADDR is "host:port" or ":port". The endpoint
// belongs on the pod's primary network (where the operator and Prometheus reach it), never on a
// rail: ":port" binds the address of the interface that holds the default route, and a host
// that is one of the job's rail addresses (or the wildcard, which includes them) is refused.
// Several processes per pod (torchrun's nproc_per_node) each get their own port: the base port
// plus the process's local rank (NEZHA_LOCAL_RANK, else LOCAL_RANK).
#pragma once

#include <string>
#include <vector>

#include "bootstrap/primary_address.h"  // defaultRouteInterface

namespace nezha {

struct ControlAddress {
  std::string host;
  int port = 0;  // 0 = any free port (in-process tests)
};

// Throws ConfigError naming NEZHA_CONTROL_ADDR. `routeTable` is /proc/net/route's text.
ControlAddress resolveControlAddress(const std::string& addr, int localRank,
                                     const std::vector<std::string>& railAddresses,
                                     const std::string& routeTable);

}  // namespace nezha
