// The data half of the transport seam: what collectives see of a rail. A Channel is one rail
// that reaches every peer rank (TCP connects a peer outside its start-up set when an exchange
// first names it: transport/peer_set.h); algorithms post batches of point-to-point sends and
// receives (IoOp) and the transport progresses them to completion. How a rail is brought up
// (listen, connect, authenticate) is the other half, in transport.h. TCP (tcp/), verbs (verbs/) and
// SHARP (sharp/) implement both. tests/transport/contract_test.cc runs one suite of this
// contract over every transport of the build (TCP, and verbs against its test double).
//
// Contract every transport keeps:
//  - Threading: exchange() and the set*() calls below are made only from
//    the rail's own thread (base/rail_worker.h), one exchange at a time. abort() may be called
//    from any thread at any time, also during an exchange.
//  - Ownership: IoOp buffers belong to the caller and stay valid until exchange() returns; the
//    transport keeps no pointer to them afterwards.
//  - Ordering: ops to the same peer in the same direction complete in posting order, across
//    exchanges too, and both ends post matching ops in the same order.
//  - Errors: any failure of the rail (connection lost, error completion, no progress within the
//    progress timeout, abort()) throws RailError from exchange(). After that the channel is
//    broken for good: every later exchange throws at once. The communicator then replays the
//    rail's unfinished work on the other rails and, once the rail heals, builds a new channel
//    (failover/readmission.cc). Anything else thrown (EnforceError) is a bug.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "transport/offload.h"

namespace nezha {

// Zero copy on an rdma rail: the caller registered the op's buffer in the rail's protection
// domain (transport/verbs/memory_region.h), and work requests address it by the buffer's own
// pointer (for a dma-buf, the iova it was registered with). The keys of that registration.
struct IoRegion {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct IoOp {
  enum Kind { kSend, kRecv };
  Kind kind = kSend;
  int peer = -1;
  void* buf = nullptr;  // not owned; must stay valid until exchange() returns
  size_t len = 0;
  // Element size: transports never split an element across streams, and onRecv only reports
  // whole elements.
  size_t align = 1;
  // Called (on the rail's thread) as received data lands: [offset, offset+len) of buf is now
  // final. Lets reductions overlap the transfer. Optional.
  std::function<void(size_t offset, size_t len)> onRecv;
  // Send only: forward data as it arrives. The send may transmit only bytes that `after` (a
  // receive in the same exchange with the same len and align) has already delivered, i.e.
  // received and passed through its onRecv. Lets a ring or chain run all its steps in one
  // exchange with no step barrier. Not owned; must point into the same ops vector.
  const IoOp* after = nullptr;
  // Optional: set on both ends' matching ops or on neither (the caller's side of the contract,
  // like matching lengths). With it the transport moves the bytes without the CPU touching
  // [buf, buf+len) — for GPU memory it cannot (docs/nccl.md "GPU memory"): the verbs rail writes
  // straight from the sender's region into the receiver's. Transports that copy through the CPU
  // (TCP, SHARP) refuse an op that carries one. No onRecv or `after` with it.
  std::optional<IoRegion> region;

  static IoOp send(int peer, const void* buf, size_t len, size_t align = 1) {
    IoOp op;
    op.kind = kSend;
    op.peer = peer;
    op.buf = const_cast<void*>(buf);  // sends never write through it
    op.len = len;
    op.align = align;
    return op;
  }
  static IoOp recv(int peer, void* buf, size_t len, size_t align = 1,
                   std::function<void(size_t, size_t)> onRecv = nullptr) {
    IoOp op;
    op.kind = kRecv;
    op.peer = peer;
    op.buf = buf;
    op.len = len;
    op.align = align;
    op.onRecv = std::move(onRecv);
    return op;
  }
  static IoOp forward(int peer, const void* buf, size_t len, size_t align, const IoOp* after) {
    IoOp op = send(peer, buf, len, align);
    op.after = after;
    return op;
  }
};

class Channel {
 public:
  virtual ~Channel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int railIndex() const = 0;
  virtual const std::string& name() const = 0;
  // Runs every op to completion, all concurrently (post + progress in one call). Throws
  // RailError if the rail fails or makes no progress within the progress timeout.
  virtual void exchange(std::vector<IoOp>& ops) = 0;
  // Breaks every connection of this rail now, from any thread: the exchange in progress and all
  // later ones fail with RailError, on this rank and on its peers. The failover code calls it
  // when a rail leaves the split (link lost here or on a peer, agreed failure); tests use it
  // to inject a failure.
  virtual void abort() = 0;
  // No-progress deadline of the following exchanges (called on the rail's thread before a
  // slice); zero = the transport's default (NEZHA_IO_TIMEOUT_MS). Never exceeds the default.
  // TCP and verbs keep this, the late-peer grace and the progress watch in one ProgressGuard
  // (progress_guard.h).
  virtual void setProgressTimeout(std::chrono::milliseconds t) = 0;
  // Asked (on the rail's thread) when the progress timeout expires: true means a peer has not
  // reached this operation yet, so the silence is the peer's, not the rail's, and the exchange
  // keeps waiting (bounded by the transport's default I/O timeout). Empty = fail at once.
  virtual void setPeersStillComing(std::function<bool()> fn) = 0;
  // Called on the rail's thread after every wait for I/O inside an exchange, and at least every
  // kProgressWatchTick while nothing moves, with the time of the rail's last progress: while a
  // receive is pending, when bytes last arrived on the channel (in this exchange or an earlier
  // one: starting an exchange is not progress); otherwise when this exchange last moved bytes
  // (its start until then). A non-empty answer fails the rail at once with that reason (RailError).
  // This is how failover tells a rail that stopped while others move data (black hole), or that
  // is far behind its prediction (gray), from one that is merely busy. Empty = no watch.
  using ProgressWatch = std::function<std::string(std::chrono::steady_clock::time_point)>;
  virtual void setProgressWatch(ProgressWatch fn) = 0;
  static constexpr std::chrono::milliseconds kProgressWatchTick{50};
  // A rail that reduces in the network (transport/offload.h), or null (only moves bytes).
  virtual CollectiveOffload* offload() { return nullptr; }
};

}  // namespace nezha
