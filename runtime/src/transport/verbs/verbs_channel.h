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
// External memory (memory_region.h): a caller that owns its buffers' registrations (the NCCL
// plugin: regMr / deregMr bracket every use) registers them in the rail's protection domain —
// device(), or a device it hands the constructor, shared by every channel of that rail — and
// passes the keys with its ops (IoOp::region). Those ops skip the staging rings: the receiver
// advertises the buffer, the sender's HCA writes into it from the caller's region (direct
// placement, verbs_peer.h). The registration's lifetime is the caller's, so the reason for
// staging above does not apply to them.
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
  // `domain` (optional): open on that device's context and protection domain instead of a new
  // one, so memory the caller registered there is valid in this rail's queue pairs (IoOp's
  // region); it must be the port this rail resolves (ConfigError otherwise). The context's async
  // events then have no reader here (one blocking reader per context): a port error shows as
  // error completions of the queue pairs instead.
  VerbsChannel(const Options& o, int railIndex, const std::string& address,
               std::shared_ptr<const VerbsDevice> domain = nullptr);
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

  // Whether exchange() moves an IoOp that carries a region (channel.h) without the CPU touching
  // its bytes: the sender's RDMA write names the caller's region, the receiver advertises its
  // registered buffer and the HCA writes into it (verbs_peer.h, "Direct placement"). What GPU
  // buffers need; ops without a region still go through the staging rings. The NCCL plugin's
  // zero-copy rule reads it (nccl/gpu_memory.h).
  static constexpr bool kPostsFromCallerMemory = true;

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
    size_t advertCursor = 0;  // receives up to here advertised (those with a region)
  };
  std::string purpose(const std::string& session, int from, int to, int stream) const;
  void connectQueuePairs(Deadline deadline);
  void asyncLoop();
  std::vector<PeerQueues> queueOps(std::vector<IoOp>& ops) const;
  // Handles every completion ready now; returns how many.
  int drainCompletions();
  bool deliver(int peer, PeerQueues& q);  // copies arrived chunks out; returns whether any
  // Handles one direct write of `len` bytes into the current receive; false if none is pending.
  bool landDirect(int peer, PeerQueues& q, uint32_t len);
  bool postAdverts(int peer, PeerQueues& q);  // direct placement: the receives' buffers
  bool postSends(int peer, PeerQueues& q);
  bool postDirect(int peer, Part& part);  // a send with a region: straight into the advert
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
