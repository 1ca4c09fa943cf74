// A fatal error of one comm: every rail down, bad usage, a broken peer. The plugin's entry
// points turn it into the NCCL result code it carries (NCCL then aborts the communicator) and
// log the message as a WARN.
#pragma once

#include <stdexcept>
#include <string>

#include "nccl/net_abi.h"

namespace nezha::ncclnet {

struct CommError : std::runtime_error {
  CommError(ncclResult_t result, const std::string& what)
      : std::runtime_error(what), code(result) {}
  ncclResult_t code;
};

}  // namespace nezha::ncclnet
