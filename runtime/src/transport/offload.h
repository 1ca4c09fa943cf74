// The collective-offload half of the transport seam: a rail whose network does a whole reduction
// itself (a SHARP switch tree aggregates every rank's contribution and returns the result), as
// opposed to a Channel that only moves bytes between two ranks. The scheduler sends such a rail
// only what it can do (small allreduces of supported types, the paper's cold path); everything
// else runs on the byte-moving rails (schedule/scheduler.h).
//
// Contract (the Channel contract of channel.h carries over):
//  - Threading: allreduce() runs on the rail's own thread, one at a time; Channel::abort() may be
//    called from any thread, also during an allreduce, and makes it throw RailError promptly.
//  - Progress: the Channel's progress timeout bounds the wait for a completion (a black-holed
//    rail never completes); when it expires and the peers-still-coming callback says a peer has
//    not reached the operation yet, the wait goes on up to the transport's default I/O timeout.
//    The progress watch is called at least every Channel::kProgressWatchTick.
//  - Errors: an error from the offload library, a timeout or an abort throw RailError; the
//    channel is then broken for good and failover finishes the operation on the other rails
//    from the preserved input (failover/failover_engine.cc), exactly as for a byte-moving rail.
//  - Results: every rank gets the same bytes (the aggregation node reduces once for all).
#pragma once

#include <cstddef>

#include "nezha/nezha.hpp"

namespace nezha {

class CollectiveOffload {
 public:
  virtual ~CollectiveOffload() = default;
  // Whether the offload reduces this type with this operator (pure, callable from any thread).
  virtual bool supports(DataType dt, ReduceOp op) const = 0;
  // out[0, count) = the reduction of every rank's in[0, count); in == out is in place.
  virtual void allreduce(const void* in, void* out, size_t count, DataType dt, ReduceOp op) = 0;
};

}  // namespace nezha
