// TCP rail transport: `streams` connections to each peer it exchanges with, all bound to the rail's
// interface (SO_BINDTODEVICE) and address so the kernel never routes a rail's traffic through
// another NIC, TCP_NODELAY, large buffers, authenticated with the job token. exchange() drives
// every pending send/receive with non-blocking sockets and poll(), splitting each message of at
// least two kMinStreamPartBytes across the peer's streams (a smaller one stays on its first); the
// parts queued on one stream move with one gathered sendmsg/recvmsg (pump()), so a small header and
// the data behind it share a write. Start-up connects only the peers of transport/peer_set.h (those
// the algorithms and the control mesh use: O(log N) of them), each with one more connection for the
// control mesh (failover/control_mesh.h), so control messages never queue behind bulk data. Any
// other peer gets its data streams when an exchange first names it (alltoall, a send to any rank):
// the higher rank dials, the lower one accepts, through the same authentication (peer_mesh.h) under
// the I/O timeout, so the rail's listener stays open for the channel's life.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

struct iovec;

#include "base/socket.h"
#include "bootstrap/rendezvous.h"
#include "transport/peer_mesh.h"
#include "transport/progress_guard.h"
#include "transport/tcp/stream_queue.h"
#include "transport/transport.h"

namespace nezha {

class TcpChannel : public Transport {
 public:
  // Opens the rail's listening socket now so its port can be published at rendezvous.
  TcpChannel(const Options& o, int railIndex, const std::string& address);
  // A rail of a two-rank job whose connections were opened and authenticated elsewhere (the
  // NCCL engine link's test, tests/nccl/engine_link_test.cc): `streams` (o.streamsPerPeer data
  // connections to the other rank) and the control connection. Connected already: no listener,
  // no connect(). A rebuild of the rail (re-admission) makes an ordinary channel instead.
  TcpChannel(const Options& o, int railIndex, const std::string& address, std::vector<Fd> streams,
             Fd control);

  RailEndpoint endpoint() const override;
  // Connects the start-up set (transport/peer_set.h): dials lower ranks, accepts higher ones
  // (peer_mesh.h). The listener stays open for peers connected on first use (closed when the
  // set is every peer, as up to 4 ranks).
  void connect(const JobTable& job, Deadline deadline) override;
  // Indexed by peer; only the start-up set's peers have one (the rest stay invalid).
  std::vector<Fd> releaseControl() override { return std::move(control_); }
  uint64_t rejectedConnections() const override { return rejected_; }
  // Peers with data streams now (start-up set plus those connected on first use); rail thread.
  std::vector<int> connectedPeers() const;
  // A message is cut across one of the peer's streams per kMinStreamPartBytes, at most all of
  // them (streamsFor()). Both ends post the same lengths (channel.h), so they cut a message
  // alike. A small message stays whole on the first stream: cut in two it costs two segments,
  // two system calls on each end and a wait for the later half, which made 1-8 KiB allreduces
  // 20-30 % slower on two streams than on one (bench/README.md, "Streams per peer"); large
  // ones gain from the streams where the CPU is the limit (the same section).
  static constexpr size_t kMinStreamPartBytes = 64 << 10;

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

 private:
  enum class Listen { kNow, kNever };
  TcpChannel(const Options& o, int railIndex, const std::string& address, Listen listen);
  // Takes each peer's connections ([peer][stream], the control connection last; empty for a
  // peer not connected yet) into use.
  void install(std::vector<std::vector<Fd>> conns);
  // Opens the data streams of the peers `ops` name that have none yet (peer_mesh.h); a failure
  // fails the rail like any other (RailError).
  void connectOnFirstUse(const std::vector<IoOp>& ops);
  StreamQueues queueOps(std::vector<IoOp>& ops) const;
  int streamsFor(size_t len) const;  // see kMinStreamPartBytes
  bool pump(StreamQueue& q, size_t& pendingQueues);
  // The parts from q's cursor that may move now, as iovecs (at most kMaxGather); 0 when the
  // head send waits for its gate.
  size_t gather(const StreamQueue& q, struct iovec* iov) const;
  // Credits `n` bytes moved to the parts from q's cursor in order (receives: onRecv).
  void advance(StreamQueue& q, size_t n, size_t& pendingQueues);
  static constexpr size_t kMaxGather = 8;
  void waitForProgress(const StreamQueues& sq);
  std::string purpose(const std::string& session, int from, int to, int stream) const;
  int fdOf(int peer, int stream) const { return streams_[peer][stream].get(); }
  [[noreturn]] void fail(const std::string& what);
  void shutDownStreams();  // connMu_ held

  RailSpec spec_;
  std::string address_;
  int rail_, rank_, size_, nstreams_;
  bool quickAck_;
  std::string token_;
  std::chrono::milliseconds ioTimeout_;
  std::chrono::milliseconds controlUserTimeout_;
  // Deadline, late-peer grace and progress watch (progress_guard.h). Progress here: a poll()
  // that saw a socket ready; arrival: bytes received on any stream.
  ProgressGuard guard_;
  PeerMesh mesh_;  // how connect() and connectOnFirstUse() reach peers (rail thread; interrupt()
                   // from any)
  SocketTuning tuning_;
  Fd listen_;
  // [peer][stream]; empty for self, invalid for a peer not connected yet. Written on the rail
  // thread under connMu_ (abort() reads it from any thread).
  std::vector<std::vector<Fd>> streams_;
  std::vector<Fd> control_;  // [peer]; until releaseControl()
  std::mutex connMu_;
  bool aborted_ = false;               // connMu_: a connection made after abort() is shut too
  std::atomic<uint64_t> rejected_{0};  // stray connections turned away by the listener
  bool broken_ = false;                // set once an I/O error is seen; the channel never recovers
};

}  // namespace nezha
