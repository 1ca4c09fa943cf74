// torch.distributed.monitored_barrier on the backend's p2p links, by gloo's algorithm
// (ProcessGroupGloo::monitoredBarrier): every other rank tells rank 0 it arrived and waits to
// be released; rank 0 waits for each within the timeout, names the ranks that did not arrive
// (the first, or all of them with wait_all_ranks), and releases the others only if all came.
// It runs on the caller's thread, not the worker: like gloo's, it does not wait for
// collectives still queued, and it is not numbered with them (op_signature.h).
#pragma once

#include <chrono>
#include <cstdint>

#include "p2p.h"

namespace nezha_torch {

// Reserved p2p tag, apart from torch's int tags and the backend's other reserved ones.
constexpr int64_t kMonitoredBarrierTag = int64_t(1) << 42;

// Throws c10::DistBackendError naming the ranks that did not pass within `timeout` (on rank 0)
// or saying rank 0 did not release this rank (on the others). After a failure the tag's
// messages are out of step between the ranks: recreate the group before the next one.
void monitoredBarrier(PeerLinks& links, int rank, int size, std::chrono::milliseconds timeout,
                      bool waitAllRanks);

}  // namespace nezha_torch
