// The transport seam. Algorithms see a rail only as a Channel: point-to-point sends and
// receives to peer ranks, issued in batches that the transport runs concurrently. TCP is the
// one implementation today; RDMA/SHARP channels plug in here without touching algorithms.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace nezha {

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
  // Runs every op to completion, all concurrently. Ops to the same peer in the same direction
  // complete in order. Both ends must issue matching ops in the same order. Throws RailError
  // if a connection fails or makes no progress within the I/O timeout; the channel is then
  // unusable (a later release replays the work on other rails).
  virtual void exchange(std::vector<IoOp>& ops) = 0;
  // Breaks every connection of this rail now, from any thread: the exchange in progress and all
  // later ones fail with RailError, on this rank and on its peers. Fault injection today; the
  // fault-tolerance work uses it to quarantine a rail.
  virtual void abort() = 0;
  // No-progress deadline of the following exchanges (called on the rail's thread before a
  // slice); zero = the transport's default (NEZHA_IO_TIMEOUT_MS). Never exceeds the default.
  virtual void setProgressTimeout(std::chrono::milliseconds t) = 0;
  // Asked (on the rail's thread) when the progress timeout expires: true means a peer has not
  // reached this operation yet, so the silence is the peer's, not the rail's, and the exchange
  // keeps waiting (bounded by the transport's default I/O timeout). Empty = fail at once.
  virtual void setPeersStillComing(std::function<bool()> fn) = 0;
};

}  // namespace nezha
