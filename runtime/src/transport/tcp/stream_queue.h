// How TcpChannel::exchange lays a batch of IoOps onto sockets: each op is cut into one
// contiguous part per stream (whole elements only), and the parts bound for the same
// (peer, stream, direction) form a queue served strictly in order, which keeps the byte order
// on every connection identical to the posting order on both ends.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/channel.h"

namespace nezha {

// A contiguous piece of one IoOp carried by one stream.
struct StreamPart {
  IoOp* op;
  size_t offset;  // within op->buf
  size_t len;
  size_t done = 0;
  size_t reported = 0;               // bytes delivered (passed to onRecv when there is one)
  const StreamPart* gate = nullptr;  // sends: may not pass gate->reported
};

// Parts queued on one (peer, stream, direction).
struct StreamQueue {
  int fd = -1;
  int peer = -1;
  bool send = false;
  std::vector<StreamPart> parts;
  size_t cursor = 0;
  bool pending() const { return cursor < parts.size(); }
  // A send whose head part waits for its gate cannot progress by itself.
  bool gated() const {
    if (!send || !pending()) return false;
    const StreamPart& p = parts[cursor];
    return p.gate != nullptr && p.done >= p.gate->reported;
  }
};

struct StreamQueues {
  std::vector<StreamQueue> queues;  // [(peer * streams + stream) * 2 + isSend]
  size_t pending = 0;               // queues with parts left
};

}  // namespace nezha
