#include "transport/tcp/tcp_channel.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "base/congestion_control.h"
#include "base/error.h"
#include "base/sha256.h"
#include "transport/peer_set.h"

namespace nezha {

TcpChannel::TcpChannel(const Options& o, int railIndex, const std::string& address)
    : TcpChannel(o, railIndex, address, Listen::kNow) {}

TcpChannel::TcpChannel(const Options& o, int railIndex, const std::string& address,
                       std::vector<Fd> streams, Fd control)
    : TcpChannel(o, railIndex, address, Listen::kNever) {
  NEZHA_ENFORCE(size_ == 2 && rank_ >= 0 && rank_ < 2,
                "adopted connections need a two-rank job, not rank ", rank_, " of ", size_);
  NEZHA_ENFORCE(static_cast<int>(streams.size()) == nstreams_, streams.size(),
                " data connections adopted, ", nstreams_, " streams per peer configured");
  // The same socket options as connections this channel opens itself (buffers, no delay,
  // user timeout, congestion control).
  for (const Fd& fd : streams) applyTuning(fd.get(), tuning_);
  std::vector<std::vector<Fd>> conns(2);
  conns[1 - rank_] = std::move(streams);
  conns[1 - rank_].push_back(std::move(control));
  install(std::move(conns));
}

TcpChannel::TcpChannel(const Options& o, int railIndex, const std::string& address, Listen listen)
    : spec_(o.rails.at(railIndex)),
      address_(address),
      rail_(railIndex),
      rank_(o.rank),
      size_(o.worldSize),
      nstreams_(o.streamsPerPeer),
      quickAck_(o.tcpQuickAck),
      token_(o.jobToken),
      ioTimeout_(o.ioTimeout),
      // A control connection whose sent bytes stay unacknowledged this long is dead (its rail
      // was cut); the kernel then drops it, so it never fills up while the rail is down.
      controlUserTimeout_(2 * o.progressFloor),
      guard_(o.ioTimeout),
      mesh_(o, railIndex, address) {
  tuning_.buffer = o.socketBuffer;
  tuning_.congestion =
      resolveCongestionControl(o.tcpCongestion, "NEZHA_TCP_CONGESTION").socketOption;
  tuning_.noDelay = true;
  // Data connections: unacknowledged data older than the I/O timeout means the path is gone.
  tuning_.userTimeout = o.ioTimeout;
  if (listen == Listen::kNow) listen_ = listenOn(address_, 0, spec_.iface, 256, tuning_);
}

RailEndpoint TcpChannel::endpoint() const {
  return {spec_.name, spec_.transport, address_, localPort(listen_.get())};
}

std::string TcpChannel::purpose(const std::string& session, int from, int to, int stream) const {
  return strCat(stream == nstreams_ ? "control" : "data", " session=",
                toHex(reinterpret_cast<const uint8_t*>(session.data()), session.size()),
                " rail=", rail_, " from=", from, " to=", to, " stream=", stream);
}

void TcpChannel::connect(const JobTable& job, Deadline deadline) {
  // Per peer of the start-up set: nstreams_ data streams, then the control connection (index
  // nstreams_). Peers outside it are connected on first use, data streams only.
  mesh_.open(job, listen_.get(), tuning_, nstreams_ + 1,
             [this, session = job.session](int from, int to, int stream) {
               return purpose(session, from, to, stream);
             });
  const std::vector<int> peers = peersUsed(rank_, size_);
  std::vector<std::vector<Fd>> conns;
  try {
    conns = mesh_.connect(peers, nstreams_ + 1, deadline);
  } catch (...) {
    rejected_ = mesh_.rejected();
    throw;
  }
  rejected_ = mesh_.rejected();
  install(std::move(conns));
  // Up to 4 ranks the set is every peer: nothing can come on demand, so no port stays open.
  if (static_cast<int>(peers.size()) == size_ - 1) {
    std::lock_guard<std::mutex> lock(connMu_);
    listen_.reset();
  }
}

void TcpChannel::install(std::vector<std::vector<Fd>> conns) {
  std::vector<Fd> control(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (conns[p].empty()) {  // not in the start-up set: connected on first use
      conns[p].resize(nstreams_);
      continue;
    }
    control[p] = std::move(conns[p][nstreams_]);
    conns[p].resize(nstreams_);
    setControlTimeouts(control[p].get(), controlUserTimeout_);
    for (auto& fd : conns[p]) setNonBlocking(fd.get(), true);
  }
  std::lock_guard<std::mutex> lock(connMu_);
  streams_ = std::move(conns);
  control_ = std::move(control);
  if (aborted_) shutDownStreams();
}

void TcpChannel::connectOnFirstUse(const std::vector<IoOp>& ops) {
  std::vector<int> missing;
  for (const IoOp& op : ops) {
    // Bad peers are queueOps' to refuse; empty ops move nothing on either end.
    if (op.len == 0 || op.peer < 0 || op.peer >= size_ || op.peer == rank_) continue;
    if (!streams_[op.peer][0].valid()) missing.push_back(op.peer);
  }
  if (missing.empty()) return;
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  std::vector<std::vector<Fd>> conns;
  try {
    conns = mesh_.connect(missing, nstreams_, Clock::now() + ioTimeout_);
  } catch (const Error& e) {  // RailError (unreachable, deadline) or AuthError
    rejected_ = mesh_.rejected();
    fail(strCat("connecting on first use: ", e.what()));
  }
  rejected_ = mesh_.rejected();
  std::lock_guard<std::mutex> lock(connMu_);
  for (int p : missing) {
    for (int s = 0; s < nstreams_; ++s) {
      setNonBlocking(conns[p][s].get(), true);
      streams_[p][s] = std::move(conns[p][s]);
    }
  }
  if (aborted_) shutDownStreams();  // exchange then fails on them like on the others
}

std::vector<int> TcpChannel::connectedPeers() const {
  std::vector<int> peers;
  for (int p = 0; p < static_cast<int>(streams_.size()); ++p) {
    if (p != rank_ && !streams_[p].empty() && streams_[p][0].valid()) peers.push_back(p);
  }
  return peers;
}

void TcpChannel::abort() {
  std::lock_guard<std::mutex> lock(connMu_);
  aborted_ = true;
  shutDownStreams();
  // A connect or a first-use accept waiting on the listener ends at once (acceptor.h), and so
  // does a dial's handshake.
  if (listen_.valid()) ::shutdown(listen_.get(), SHUT_RDWR);
  mesh_.interrupt();
}

void TcpChannel::shutDownStreams() {
  // shutdown() (not close()) is safe while the rail thread polls these fds: they stay valid,
  // every pending and later send/recv on them fails at once, and the peer sees EOF.
  for (auto& peer : streams_) {
    for (auto& fd : peer) {
      if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
    }
  }
}

void TcpChannel::fail(const std::string& what) {
  broken_ = true;
  abort();  // the peers learn at once instead of after their own timeout
  throw RailError(rail_, strCat("rail ", spec_.name, " (", spec_.iface, "): ", what));
}

void TcpChannel::exchange(std::vector<IoOp>& ops) {
  if (broken_) fail("used after an earlier failure");
  connectOnFirstUse(ops);
  StreamQueues sq = queueOps(ops);
  guard_.start();
  while (sq.pending > 0) {
    for (StreamQueue& q : sq.queues) {
      if (q.pending() && pump(q, sq.pending) && !q.send) guard_.arrived();
    }
    if (sq.pending == 0) break;
    waitForProgress(sq);
  }
}

int TcpChannel::streamsFor(size_t len) const {
  const size_t parts = std::max<size_t>(1, len / kMinStreamPartBytes);
  return static_cast<int>(std::min<size_t>(parts, static_cast<size_t>(nstreams_)));
}

StreamQueues TcpChannel::queueOps(std::vector<IoOp>& ops) const {
  StreamQueues sq;
  sq.queues.resize(static_cast<size_t>(size_) * nstreams_ * 2);
  // Where each op's per-stream parts live: (queue, index) or (-1, -1) for an empty part.
  std::vector<std::vector<std::pair<long, long>>> where(ops.size());
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    IoOp& op = ops[oi];
    where[oi].assign(nstreams_, {-1, -1});
    // A socket copies through the CPU, which must not touch a registered (GPU) buffer.
    NEZHA_ENFORCE(!op.region, "rail ", spec_.name,
                  ": tcp cannot move a registered (zero-copy) buffer; only rdma rails can");
    if (op.len == 0) continue;
    NEZHA_ENFORCE(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad peer ", op.peer);
    NEZHA_ENFORCE(op.align > 0 && op.len % op.align == 0, "length ", op.len, " not aligned to ",
                  op.align);
    size_t units = op.len / op.align;
    const int used = streamsFor(op.len);
    for (int s = 0; s < used; ++s) {
      size_t begin = units * s / used * op.align;
      size_t end = units * (s + 1) / used * op.align;
      if (end == begin) continue;
      size_t qi = (static_cast<size_t>(op.peer) * nstreams_ + s) * 2 + (op.kind == IoOp::kSend);
      StreamQueue& q = sq.queues[qi];
      if (!q.pending()) ++sq.pending;
      q.fd = fdOf(op.peer, s);
      q.peer = op.peer;
      q.send = op.kind == IoOp::kSend;
      where[oi][s] = {static_cast<long>(qi), static_cast<long>(q.parts.size())};
      q.parts.push_back(StreamPart{&op, begin, end - begin});
    }
  }
  // Resolve forwarding gates now that the part vectors no longer move.
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    const IoOp& op = ops[oi];
    if (op.after == nullptr || op.len == 0) continue;
    size_t gi = static_cast<size_t>(op.after - ops.data());
    NEZHA_ENFORCE(gi < ops.size() && op.kind == IoOp::kSend && op.after->kind == IoOp::kRecv &&
                      op.after->len == op.len && op.after->align == op.align,
                  "forward gate must be a receive of the same shape in this exchange");
    for (int s = 0; s < nstreams_; ++s) {
      auto [qi, pi] = where[oi][s];
      if (qi < 0) continue;
      auto [gq, gp] = where[gi][s];
      sq.queues[qi].parts[pi].gate = &sq.queues[gq].parts[gp];
    }
  }
  return sq;
}

// Moves as many bytes as the socket takes without blocking, several of the queue's parts per
// system call (gather()): a small operation's parts to one peer (a signed operation's header
// and the data behind it, failover/signed_channel.h; a ring's steps) leave in one write, one
// segment, and arrive in one read when they are there. Returns whether any byte moved.
bool TcpChannel::pump(StreamQueue& q, size_t& pendingQueues) {
  bool moved = false;
  struct iovec iov[kMaxGather];
  while (q.pending()) {
    const size_t parts = gather(q, iov);
    if (parts == 0) break;  // the head send waits for the data it forwards
    size_t want = 0;
    for (size_t i = 0; i < parts; ++i) want += iov[i].iov_len;
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = parts;
    ssize_t n;
    if (q.send) {
      n = ::sendmsg(q.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      n = ::recvmsg(q.fd, &msg, MSG_DONTWAIT);
      if (n == 0) fail(strCat("connection to rank ", q.peer, " closed by peer"));
      // Whatever arrived is acknowledged now: the sender may be waiting for this ACK to open its
      // congestion window, and the kernel may otherwise hold it for its delayed-ACK timer
      // (40 ms) -- on unshaped rails that stalled 256 KiB rings for 10-100 ms at a time
      // (measured; the runs are under bench/results). Quick-ACK mode is not sticky, so it is asked
      // each time.
      if (quickAck_ && n > 0) {
        const int one = 1;
        ::setsockopt(q.fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
      }
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      fail(strCat(q.send ? "send to" : "receive from", " rank ", q.peer, ": ",
                  std::strerror(errno)));
    }
    moved = true;
    advance(q, static_cast<size_t>(n), pendingQueues);
    // Short: the socket buffer is full (send) or drained (receive); poll() says when to go on.
    // A gated send that went whole loops to see whether its gate moved meanwhile.
    if (static_cast<size_t>(n) < want) break;
  }
  return moved;
}

size_t TcpChannel::gather(const StreamQueue& q, struct iovec* iov) const {
  size_t parts = 0;
  for (size_t i = q.cursor; i < q.parts.size() && parts < kMaxGather; ++i) {
    const StreamPart& part = q.parts[i];
    // A send may not pass its gate, and the bytes behind a part must wait for all of it.
    const size_t limit = q.send && part.gate ? part.gate->reported : part.len;
    if (part.done >= limit) break;
    iov[parts].iov_base = static_cast<char*>(part.op->buf) + part.offset + part.done;
    iov[parts].iov_len = limit - part.done;
    ++parts;
    if (limit < part.len) break;
  }
  return parts;
}

void TcpChannel::advance(StreamQueue& q, size_t n, size_t& pendingQueues) {
  while (n > 0) {
    StreamPart& part = q.parts[q.cursor];
    const size_t take = std::min(n, part.len - part.done);
    part.done += take;
    n -= take;
    if (!q.send) {
      size_t whole = part.done / part.op->align * part.op->align;
      if (whole > part.reported) {
        if (part.op->onRecv) part.op->onRecv(part.offset + part.reported, whole - part.reported);
        part.reported = whole;
      }
    }
    if (part.done == part.len) {
      ++q.cursor;
      if (!q.pending()) --pendingQueues;
    }
  }
}

// Sleeps in poll() until a queue can move, then lets the guard judge the silence.
void TcpChannel::waitForProgress(const StreamQueues& sq) {
  std::vector<struct pollfd> pfds;
  std::vector<const StreamQueue*> owners;
  for (const StreamQueue& q : sq.queues) {
    if (!q.pending() || q.gated()) continue;  // a gated send wakes through its receive
    pfds.push_back({q.fd, static_cast<short>(q.send ? POLLOUT : POLLIN), 0});
    owners.push_back(&q);
  }
  // A gated send's receive is always pending while it waits, so this means ops were matched
  // wrongly by the algorithm.
  NEZHA_ENFORCE(!pfds.empty(), "exchange deadlock: only forwarding sends remain");
  int n = ::poll(pfds.data(), pfds.size(), guard_.waitMs());
  if (n < 0 && errno != EINTR) fail(sysError("poll", errno));
  const bool receiving = std::any_of(sq.queues.begin(), sq.queues.end(),
                                     [](const StreamQueue& q) { return !q.send && q.pending(); });
  const std::string why = guard_.judge(n > 0, receiving, [&] {
    std::ostringstream waiting;
    for (const StreamQueue* q : owners) waiting << (q->send ? " send->" : " recv<-") << q->peer;
    return waiting.str();
  });
  if (!why.empty()) fail(why);
}

}  // namespace nezha
