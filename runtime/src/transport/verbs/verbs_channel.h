// RDMA rail transport over libibverbs (rdma-core): one RC queue pair per peer on the HCA port
// behind the rail's interface (discovery.h: sysfs, the RoCE v2 GID whose address is the rail's
// IP), all sharing one completion queue and completion channel.
//
// Setup (transport.h): like TCP, the rail listens on its IP; every pair of ranks opens two
// TCP connections authenticated with the job token and session: a bootstrap connection, over
// which the queue pairs' addresses (QPN, GID, LID, receive ring address and rkey) are
// exchanged and which then stays open as the peer's liveness line (EOF = the peer aborted the
// rail, so peers learn at once instead of after the hardware's retry timeout), and a control
// connection handed to the control mesh by releaseControl().
//
// Data path (verbs_peer.h): RDMA write with immediate into pre-registered staging rings, with
// credit flow control. Why not send/receive: with writes the receiver never has to post a
// buffer per message (receives are zero-length, only counting completions), the immediate
// carries the chunk length in the completion itself, and the same completion model carries
// over unchanged to a zero-copy path in which the receiver advertises the IoOp buffer instead
// of a slot. Why staging rather than registering the IoOp buffers: the seam's contract keeps
// no pointer to a buffer once exchange() returns, and a cached registration of user memory
// outlives that (freed and reused pages would be read through a stale registration, a classic
// source of silent corruption without memory hooks). The copy runs at memory bandwidth, far
// above a rail's. Chunks are at most one slot, so one peer's stream cannot monopolize a rail
// and a rail's bytes are spread in small units the scheduler can balance against other rails.
//
// External memory (memory_region.h): a caller that owns its buffers' registrations registers
// them on device() (host memory or a dma-buf) for a zero-copy path of its own.
//
// Progress (channel.h): exchange() posts, then polls the CQ; when nothing is ready it arms
// the CQ and sleeps in poll() on the completion channel's fd and the peers' bootstrap
// connections, with the same no-progress deadline, late-peer grace and progress watch as TCP.
// Failures: error completions, a peer's EOF, abort() (QPs to ERR + bootstrap connections shut
// down, from any thread) throw RailError; port errors and fatal device errors (async events,
// own thread) go to the health listener.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "bootstrap/rendezvous.h"
#include "transport/peer_mesh.h"
#include "transport/progress_guard.h"
#include "transport/transport.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_peer.h"

namespace nezha {

class VerbsChannel : public Transport {
 public:
  // Resolves the rail's HCA/port/GID (sysfs under NEZHA_RDMA_SYSFS_ROOT), opens the device,
  // starts the async event thread and listens on `address`. Throws ConfigError when the rail
  // has no RDMA device, RailError when it cannot be opened.
  VerbsChannel(const Options& o, int railIndex, const std::string& address);
  ~VerbsChannel() override;

  RailEndpoint endpoint() const override;
  void connect(const JobTable& job, Deadline deadline) override;
  std::vector<Fd> releaseControl() override { return std::move(control_); }
  uint64_t rejectedConnections() const override { return rejected_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int railIndex() const override { return rail_; }
  const std::string& name() const override { return spec_.name; }
  void exchange(std::vector<IoOp>& ops) override;
  void abort() override;
  void setProgressTimeout(std::chrono::milliseconds t) override { guard_.setTimeout(t); }
  void setPeersStillComing(std::function<bool()> fn) override {
    guard_.setPeersStillComing(std::move(fn));
  }
  void setProgressWatch(ProgressWatch fn) override { guard_.setWatch(std::move(fn)); }

  // The HCA port this rail opened. Callers that register their own memory for zero-copy (the
  // NCCL plugin: memory_region.h, probeDmabufSupport) register it with this device's
  // protection domain, and release it before the channel goes.
  const VerbsDevice& device() const { return *device_; }

  // Whether exchange() posts an IoOp's bytes from a caller's registered memory region (zero
  // copy, what GPU buffers need: the CPU cannot touch them) rather than copying them through
  // the staging rings below. Not yet: the IoOps carry no memory handle and receives land in
  // the rings (see the top of this file). The NCCL plugin stays host-staged while this is false
  // (nccl/gpu_memory.h).
  static constexpr bool kPostsFromCallerMemory = false;

  // Staging: slots per peer and direction, and bytes per slot (= the largest chunk).
  static constexpr int kSlots = 16;
  static constexpr size_t kSlotBytes = 128 << 10;

 private:
  struct Part {  // one IoOp's bytes on its peer's queue
    IoOp* op;
    size_t done = 0;             // sends: bytes posted; receives: bytes copied out (= reported)
    const Part* gate = nullptr;  // forwarding sends: may not pass gate->done
  };
  struct PeerQueues {
    std::vector<Part> sends, recvs;
    size_t sendCursor = 0, recvCursor = 0;
  };
  std::string purpose(const std::string& session, int from, int to, int stream) const;
  void connectQueuePairs(Deadline deadline);
  void asyncLoop();
  std::vector<PeerQueues> queueOps(std::vector<IoOp>& ops) const;
  // Handles every completion ready now; returns how many.
  int drainCompletions();
  bool deliver(int peer, PeerQueues& q);  // copies arrived chunks out; returns whether any
  bool postSends(int peer, PeerQueues& q);
  void waitForProgress(bool receiving);
  [[noreturn]] void fail(const std::string& what);

  RailSpec spec_;
  std::string address_;
  int rail_, rank_, size_;
  std::string token_;
  std::chrono::milliseconds ioTimeout_;
  std::chrono::milliseconds controlUserTimeout_;
  // Deadline, late-peer grace and progress watch (progress_guard.h). Progress here: a
  // completion handled or a chunk copied; arrival: a data chunk's completion.
  ProgressGuard guard_;
  PeerMesh mesh_;  // how connect() reaches every peer
  SocketTuning tuning_;
  // Declaration order = reverse destruction order: peers (QPs, MRs) go before the device.
  std::unique_ptr<VerbsDevice> device_;
  std::vector<std::unique_ptr<VerbsPeer>> peers_;  // [peer]; null for self
  Fd listen_;
  std::vector<std::vector<Fd>> pending_;  // [peer][stream] during connect()
  std::vector<Fd> control_;
  uint64_t rejected_ = 0;
  bool broken_ = false;
  std::atomic<bool> aborted_{false};
  Fd wake_;  // eventfd: stops the async thread
  std::thread async_;
};

}  // namespace nezha
