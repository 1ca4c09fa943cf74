#include "transport/transport.h"

#include "base/error.h"
#include "transport/sharp/sharp_channel.h"
#include "transport/tcp/tcp_channel.h"
#ifdef NEZHA_WITH_VERBS
#include "transport/verbs/verbs_channel.h"
#endif

namespace nezha {

std::unique_ptr<Transport> makeTransport(const Options& o, int railIndex,
                                         const std::string& address,
                                         std::shared_ptr<const VerbsDevice> domain) {
  const RailSpec& spec = o.rails.at(railIndex);
  if (spec.transport == "tcp") return std::make_unique<TcpChannel>(o, railIndex, address);
#ifdef NEZHA_WITH_VERBS
  if (spec.transport == "rdma")
    return std::make_unique<VerbsChannel>(o, railIndex, address, std::move(domain));
#else
  (void)domain;
#endif
  if (spec.transport == "sharp") return std::make_unique<SharpChannel>(o, railIndex, address);
  // Config parsing refuses unknown transports first; this is the last line for callers that
  // built Options by hand.
  throw ConfigError(strCat("rail ", spec.name, ": transport \"", spec.transport,
                           "\" is not available in this build"));
}

}  // namespace nezha
