// Connecting gloo-bench's ranks: one Gloo context per interface of the split (one, unless the
// run is a hand split), each with a tcp device bound to its interface.
#pragma once

#include <gloo/context.h>

#include <memory>
#include <vector>

#include "bench_options.h"

namespace gloobench {

// Connected contexts, in the order of opts.split.ifaces. With one interface the ranks meet in the
// FileStore under opts.storeDir exactly as gloo-bench always did; with several, each rail's keys
// live under its interface name (a PrefixStore) so the rails' rendezvous do not collide.
// Throws UsageError naming --iface when an interface cannot be used; gloo::Exception when the
// rendezvous fails or times out.
std::vector<std::shared_ptr<gloo::Context>> ConnectRails(const BenchOptions& opts);

}  // namespace gloobench
