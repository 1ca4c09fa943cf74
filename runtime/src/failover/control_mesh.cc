#include "failover/control_mesh.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "failover/mesh_frame.h"
#include "nezha/nezha.hpp"
#include "util/wire.h"

namespace nezha {

using std::chrono::milliseconds;

namespace {
// Rounds a peer may run ahead of this rank (it finished round k when it heard from everyone,
// so it can be at most one ahead; more means a broken or hostile sender).
constexpr uint64_t kMaxRoundsAhead = 2;
// How long a send may wait for room in a socket that already took part of a frame (the frame
// must be finished or the stream is garbage). Control frames are tiny; this only happens when
// the connection is dying.
constexpr auto kFrameFinishBudget = std::chrono::milliseconds(200);
// A round sent on one rail per peer goes out on every rail if it has not completed this soon.
constexpr auto kResendAfter = std::chrono::milliseconds(3);

}  // namespace

struct ControlMesh::Conn {
  Fd fd;
  int peer = -1;
  int rail = -1;
  std::string in;                   // bytes of an unfinished frame; reader thread only
  std::atomic<bool> closed{false};  // EOF, error, bad frame or replaced

  void close() {
    if (!closed.exchange(true)) ::shutdown(fd.get(), SHUT_RDWR);
  }
};

ControlMesh::ControlMesh(int rank, int worldSize, size_t rails, std::chrono::milliseconds silence,
                         RailDownFn onRailDown, std::chrono::milliseconds peerSilence)
    : rank_(rank),
      size_(worldSize),
      rails_(rails),
      silence_(silence),
      peerSilence_(worldSize > 1 ? peerSilence : std::chrono::milliseconds(0)),
      onRailDown_(std::move(onRailDown)) {
  for (int p = 0; p < size_; ++p) {
    peerOpsStarted_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
    lastHeard_.push_back(std::make_unique<std::atomic<int64_t>>(nowNs()));
  }
  int fds[2];
  NEZHA_ENFORCE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0, sysError("pipe2", errno));
  wakeRead_ = Fd(fds[0]);
  wakeWrite_ = Fd(fds[1]);
  thread_ = std::thread([this] { loop(); });
  if (peerSilence_.count() > 0) beat_ = std::thread([this] { beat(); });
}

ControlMesh::~ControlMesh() {
  {
    std::lock_guard<std::mutex> lock(beatMu_);
    stop_ = true;
  }
  beatCv_.notify_all();
  if (beat_.joinable()) beat_.join();
  wake();
  thread_.join();
}

// Heartbeats: a HERE frame (this rank's operation, as if asked) on every open connection, every
// fifth of the peer silence, so a live peer is heard on every working rail several times per
// window. Its own thread: the reader thread waits while a round reads for itself, and a round
// may wait long for a late peer. A full socket is skipped (the rail is dying; others carry it).
void ControlMesh::beat() {
  const auto every = std::max(peerSilence_ / 5, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(beatMu_);
  while (!beatCv_.wait_for(lock, every, [this] { return stop_.load(); })) {
    lock.unlock();
    sendEverywhere(encodeMeshFrame(kMeshHere, 0, opsStarted_.load(), {}), false);
    lock.lock();
  }
}

std::vector<int> ControlMesh::silentPeers() const {
  std::vector<int> silent;
  if (peerSilence_.count() == 0) return silent;
  const int64_t now = nowNs(),
                window = std::chrono::duration_cast<std::chrono::nanoseconds>(peerSilence_).count();
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && now - lastHeard_[p]->load() >= window) silent.push_back(p);
  }
  return silent;
}

void ControlMesh::wake() {
  const char b = 1;
  ssize_t ignored = ::write(wakeWrite_.get(), &b, 1);  // a full pipe already wakes the reader
  (void)ignored;
}

void ControlMesh::attach(int rail, std::vector<Fd> conns) {
  std::vector<std::shared_ptr<Conn>> fresh;
  for (int p = 0; p < static_cast<int>(conns.size()); ++p) {
    if (!conns[p].valid()) continue;
    setNonBlocking(conns[p].get(), true);
    auto c = std::make_shared<Conn>();
    c->fd = std::move(conns[p]);
    c->peer = p;
    c->rail = rail;
    fresh.push_back(std::move(c));
    lastHeard_[p]->store(nowNs());  // a connection just made proves the peer alive
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Conn>> kept;
    for (auto& c : conns_) {
      if (c->rail == rail) {
        c->close();  // snapshots still holding it keep the fd open until they let go
      } else {
        kept.push_back(std::move(c));
      }
    }
    for (auto& c : fresh) kept.push_back(std::move(c));
    conns_ = std::move(kept);
  }
  wake();
}

void ControlMesh::closeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) c->close();
}

std::vector<int> ControlMesh::openPeers() const {
  std::vector<int> open(rails_, 0);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : conns_) {
    if (!c->closed) ++open[c->rail];
  }
  return open;
}

bool ControlMesh::peerReachable(int peer) const {
  for (const auto& c : conns_) {
    if (c->peer == peer && !c->closed) return true;
  }
  return false;
}

bool ControlMesh::writeFrame(Conn& c, const std::string& frame, bool waitForRoom) {
  size_t sent = 0;
  const auto giveUp = Clock::now() + kFrameFinishBudget;
  while (sent < frame.size()) {
    const ssize_t n =
        ::send(c.fd.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      c.close();  // the connection failed
      return false;
    }
    if (sent == 0 && !waitForRoom) return false;  // full: let another rail carry it
    if (Clock::now() >= giveUp) {
      if (sent > 0) c.close();  // a torn frame would garble the stream
      return false;
    }
    struct pollfd p {
      c.fd.get(), POLLOUT, 0
    };
    ::poll(&p, 1, 10);
  }
  return true;
}

void ControlMesh::sendEverywhere(const std::string& frame, bool mustReachAll, int onlyPeer) {
  std::vector<std::shared_ptr<Conn>> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot = conns_;
  }
  std::lock_guard<std::mutex> lock(sendMu_);
  std::vector<bool> reached(size_, false);
  for (auto& c : snapshot) {
    if (c->closed || (onlyPeer >= 0 && c->peer != onlyPeer)) continue;
    if (writeFrame(*c, frame, false)) reached[c->peer] = true;
  }
  if (!mustReachAll) return;
  // No copy got out to some peer (every connection to it full): wait briefly for room rather
  // than lose an agreement message.
  for (auto& c : snapshot) {
    if (c->closed || reached[c->peer] || c->peer == rank_) continue;
    if (onlyPeer >= 0 && c->peer != onlyPeer) continue;
    if (writeFrame(*c, frame, true)) reached[c->peer] = true;
  }
}

bool ControlMesh::sendPrimary(const std::string& frame) {
  std::vector<std::shared_ptr<Conn>> first(size_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      if (c->closed) continue;
      auto& f = first[c->peer];
      if (!f || c->rail < f->rail) f = c;
    }
  }
  std::lock_guard<std::mutex> lock(sendMu_);
  bool all = true;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && !(first[p] && writeFrame(*first[p], frame, false))) all = false;
  }
  return all;
}

void ControlMesh::notifyRailDown(int rail, uint64_t generation) {
  if (size_ > 1)
    sendEverywhere(encodeMeshFrame(kMeshRailDown, static_cast<uint16_t>(rail), generation, {}),
                   false);
}

int64_t ControlMesh::nowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void ControlMesh::ask(const std::vector<int>& peers, uint64_t op) {
  const std::string frame = encodeMeshFrame(kMeshWhere, 0, op, {});
  for (int p : peers) sendEverywhere(frame, false, p);
}

bool ControlMesh::peersBehind(uint64_t op) {
  std::vector<int> asked;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peerOpsStarted_[p]->load() < op + 1) asked.push_back(p);
  }
  if (asked.empty()) return false;
  const int64_t since = nowNs();
  ask(asked, op);
  std::unique_lock<std::mutex> lock(mu_);
  const bool answered = cv_.wait_for(lock, silence_, [&] {
    for (int p : asked) {
      if (lastHeard_[p]->load() < since) return false;
    }
    return true;
  });
  if (!answered) return false;  // someone is unreachable: the silence is not just lateness
  for (int p : asked) {
    if (peerOpsStarted_[p]->load() < op + 1) return true;
  }
  return false;
}

void ControlMesh::maxReduce(std::vector<double>& values, std::chrono::milliseconds timeout) {
  if (size_ == 1) return;
  const uint64_t round = ++round_;
  std::unique_lock<std::mutex> reading(readMu_);
  // Healthy rounds go out once per peer; if the round is not complete soon (a rail died
  // silently under the first copy), every rail carries a copy. Duplicates are dropped.
  const std::string frame = encodeMeshFrame(kMeshAgree, 0, round, values);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sent_[round] = frame;  // kept for peers that ask again after this rank moved on
    while (sent_.size() > 3) sent_.erase(sent_.begin());
  }
  RoundChase chase;
  chase.start = Clock::now();
  chase.resendAt = chase.start + kResendAfter;
  // Missing peers are asked where they are every quarter of the silence window; one that has
  // not answered anything for the whole window is unreachable.
  chase.askEvery = std::max(silence_ / 4, std::chrono::milliseconds(1));
  chase.nextAsk = chase.start + chase.askEvery;
  chase.everywhere = !sendPrimary(frame);
  if (chase.everywhere) sendEverywhere(frame, true);
  const auto deadline = chase.start + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const RoundState st = inspectRound(round, chase.start);
    if (st.missingPeers.empty() || !st.unreachable.empty() || Clock::now() >= deadline) {
      finishRound(round, st, timeout, values);
      return;
    }
    lock.unlock();
    chaseMissing(round, frame, st.missingPeers, chase);
    auto until = std::min(
        deadline, chase.everywhere ? chase.nextAsk : std::min(chase.nextAsk, chase.resendAt));
    // With heartbeats, look again every beat: a missing peer's silence is judged by the clock.
    if (peerSilence_.count() > 0) until = std::min(until, Clock::now() + peerSilence_ / 5);
    readFor(std::max(std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now()),
                     std::chrono::microseconds(0)));
    lock.lock();
  }
}

// mu_ held. Who has not sent this round yet, and whether any of them is known unreachable: its
// control connections closed on every rail, or nothing heard from it for the silence window.
ControlMesh::RoundState ControlMesh::inspectRound(uint64_t round, Clock::time_point start) {
  auto& slot = inbox_[round];
  slot.resize(size_);
  RoundState st;
  std::string gone, silent;
  // With heartbeats a peer's silence is judged at once (a live peer is heard every fifth of the
  // window); without, only after the round itself waited the window (nothing may have been
  // sent before it).
  const bool beats = peerSilence_.count() > 0;
  const auto window = beats ? peerSilence_ : silence_;
  const int64_t now = nowNs(), silenceNs = window.count() * 1000000;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || slot[p]) continue;
    st.missing += strCat(st.missing.empty() ? "" : ", ", p);
    st.missingPeers.push_back(p);
    if (!peerReachable(p)) gone += strCat(gone.empty() ? "" : ", ", p);
    if ((beats || Clock::now() - start >= silence_) && now - lastHeard_[p]->load() >= silenceNs) {
      silent += strCat(silent.empty() ? "" : ", ", p);
    }
  }
  if (!gone.empty()) {
    st.unreachable = strCat("rank(s) ", gone,
                            " closed their control connections on every rail (process gone, or "
                            "every rail between us failed)");
  } else if (!silent.empty()) {
    st.unreachable =
        strCat("rank(s) ", silent, " answered nothing for ", window.count(),
               " ms on any rail (unreachable: every rail between us is down, or the host is gone)");
  }
  return st;
}

// mu_ held. Ends the round: a clear RailError if a peer is unreachable or late past the
// timeout, else the element-wise max of every rank's values.
void ControlMesh::finishRound(uint64_t round, const RoundState& st,
                              std::chrono::milliseconds timeout, std::vector<double>& values) {
  std::vector<std::unique_ptr<std::vector<double>>> got = std::move(inbox_[round]);
  inbox_.erase(round);
  finished_ = round;
  if (!st.unreachable.empty()) {
    throw RailError(-1, strCat("agreement round ", round, ": ", st.unreachable));
  }
  if (!st.missingPeers.empty()) {
    throw RailError(-1, strCat("agreement round ", round, ": no word from rank(s) ", st.missing,
                               " within ", timeout.count(), " ms on any rail"));
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (got[p]->size() != values.size()) {
      throw ConfigError(strCat("agreement round ", round, ": rank ", p, " sent ", got[p]->size(),
                               " values, this rank ", values.size(),
                               " (ranks called different collectives?)"));
    }
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::max(values[i], (*got[p])[i]);
  }
}

// mu_ not held. After kResendAfter the round goes out on every rail; missing peers are asked to
// send their copy again (RESEND) and where they are, every quarter of the silence window.
void ControlMesh::chaseMissing(uint64_t round, const std::string& frame,
                               const std::vector<int>& missingPeers, RoundChase& chase) {
  const bool firstResend = !chase.everywhere && Clock::now() >= chase.resendAt;
  if (firstResend) {
    sendEverywhere(frame, true);
    chase.everywhere = true;
  }
  if (firstResend || Clock::now() >= chase.nextAsk) {
    const std::string again = encodeMeshFrame(kMeshResend, 0, round, {});
    for (int p : missingPeers) sendEverywhere(again, false, p);
  }
  if (Clock::now() >= chase.nextAsk) {
    ask(missingPeers, opsStarted_.load());
    chase.nextAsk = Clock::now() + chase.askEvery;
  }
}

void ControlMesh::readFor(std::chrono::microseconds wait) {
  std::vector<std::shared_ptr<Conn>> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      if (!c->closed) snapshot.push_back(c);
    }
  }
  std::vector<struct pollfd> pfds;
  for (auto& c : snapshot) pfds.push_back({c->fd.get(), POLLIN, 0});
  if (pfds.empty()) {
    std::this_thread::sleep_for(wait);
    return;
  }
  const struct timespec ts {
    static_cast<time_t>(wait.count() / 1000000), static_cast<long>(wait.count() % 1000000 * 1000)
  };
  if (::ppoll(pfds.data(), pfds.size(), &ts, nullptr) <= 0) return;
  for (size_t i = 0; i < snapshot.size(); ++i) {
    if (pfds[i].revents != 0) readFrom(*snapshot[i]);
  }
}

void ControlMesh::dispatch(const Conn& c, MeshFrame& f) {
  const uint16_t type = f.type, rail = f.rail;
  const uint64_t seq = f.seq;
  lastHeard_[c.peer]->store(nowNs());
  if (type == kMeshRailDown) {
    if (rail < rails_) onRailDown_(c.peer, rail, seq);
    return;
  }
  if (type == kMeshResend) {
    std::string frame;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sent_.find(seq);
      if (it != sent_.end()) frame = it->second;
    }
    if (!frame.empty()) sendEverywhere(frame, false, c.peer);
    return;
  }
  if (type == kMeshWhere) {
    sendEverywhere(encodeMeshFrame(kMeshHere, 0, opsStarted_.load(), {}), false, c.peer);
    return;
  }
  if (type == kMeshHere) {
    auto& started = *peerOpsStarted_[c.peer];
    uint64_t cur = started.load();
    while (cur < seq && !started.compare_exchange_weak(cur, seq)) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
    return;
  }
  std::vector<double> values = std::move(f.values);
  std::lock_guard<std::mutex> lock(mu_);
  if (seq <= finished_) return;  // a late copy from a slower rail
  auto& slot = inbox_[seq];
  slot.resize(size_);
  if (!slot[c.peer]) slot[c.peer] = std::make_unique<std::vector<double>>(std::move(values));
  cv_.notify_all();
}

void ControlMesh::readFrom(Conn& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.close();  // EOF or error: the peer (or the rail) is gone
    break;
  }
  // Frames that arrived before an EOF still count: a peer that sends its last round and then
  // closes (its communicator failed) must not lose that round.
  for (;;) {
    MeshFrame f;
    std::string bad;
    const MeshDecode got = takeMeshFrame(c.in, f, bad);
    if (got == MeshDecode::kNeedMore) break;
    if (got == MeshDecode::kFrame && f.type == kMeshAgree) {
      std::lock_guard<std::mutex> lock(mu_);
      if (f.seq > finished_ + kMaxRoundsAhead) bad = strCat("round ", f.seq, " too far ahead");
    }
    if (!bad.empty()) {
      std::fprintf(stderr,
                   "nezha: rank %d: dropping control connection to rank %d on rail %d: %s\n", rank_,
                   c.peer, c.rail, bad.c_str());
      c.close();
      c.in.clear();
      break;
    }
    dispatch(c, f);
  }
}

void ControlMesh::loop() {
  std::vector<std::shared_ptr<Conn>> snapshot;
  std::vector<struct pollfd> pfds;
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      snapshot.clear();
      for (auto& c : conns_) {
        if (!c->closed) snapshot.push_back(c);
      }
    }
    pfds.assign(1, {wakeRead_.get(), POLLIN, 0});
    for (auto& c : snapshot) pfds.push_back({c->fd.get(), POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), 1000) < 0 && errno != EINTR) break;
    if (pfds[0].revents) {
      char drain[64];
      while (::read(wakeRead_.get(), drain, sizeof(drain)) > 0) {
      }
    }
    bool changed = false;
    std::lock_guard<std::mutex> reading(readMu_);  // waits while a round reads for itself
    for (size_t i = 0; i < snapshot.size(); ++i) {
      if (pfds[i + 1].revents == 0) continue;
      readFrom(*snapshot[i]);
      changed = changed || snapshot[i]->closed;
    }
    if (changed) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();  // a waiting round re-checks whether its peers are still reachable
    }
  }
}

}  // namespace nezha
