#include "failover/control_mesh.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "base/wire.h"
#include "failover/mesh_frame.h"
#include "nezha/nezha.hpp"

namespace nezha {

using std::chrono::milliseconds;

namespace {
// Rounds a peer's frames may run ahead of the last round this rank ended (a peer finished round
// k only when every rank took part in it, so it can be at most one round ahead of the round
// this rank is in; more means a broken or hostile sender).
constexpr uint64_t kMaxRoundsAhead = 2;
// How long a send may wait for room in a socket that already took part of a frame (the frame
// must be finished or the stream is garbage). Control frames are tiny; this only happens when
// the connection is dying.
constexpr auto kFrameFinishBudget = std::chrono::milliseconds(200);
// A step sent on one rail goes out on every rail (and its source is asked to send again) when
// the step this rank waits for has not come this soon.
constexpr auto kResendAfter = std::chrono::milliseconds(3);

int ceilLog2(int n) {
  int steps = 0;
  while ((int64_t{1} << steps) < n) ++steps;
  return steps;
}

// A verdict on a silent peer holds this many peer silences after it came unless a newer one
// comes: the peer's watchers send a new one every silence while it stays silent, so it lapses
// only once they hear the peer again (or are gone themselves).
constexpr int64_t kVerdictLifeSilences = 2;

// A peer's reason text, for an error message: printable ASCII only.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

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
      steps_(ceilLog2(worldSize)),
      silence_(silence),
      peerSilence_(worldSize > 1 ? peerSilence : std::chrono::milliseconds(0)),
      onRailDown_(std::move(onRailDown)) {
  for (int p = 0; p < size_; ++p) {
    peerOpsStarted_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
    lastHeard_.push_back(std::make_unique<std::atomic<int64_t>>(0));  // not heard yet
  }
  peerRound_.assign(size_, 0);
  neighbours_ = neighboursOf(rank_, size_);
  watched_.assign(size_, 0);
  for (int p : neighbours_) watched_[p] = 1;
  verdictAt_.assign(size_, 0);
  floodedAt_.assign(size_, 0);
  attachedOnce_.assign(size_, 0);
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

std::vector<int> ControlMesh::neighboursOf(int rank, int worldSize) {
  std::vector<int> out;
  for (int k = 0; k < ceilLog2(worldSize); ++k) {
    const int64_t hop = (int64_t{1} << k) % worldSize;
    for (int64_t p : {(rank + hop) % worldSize, (rank - hop + worldSize) % worldSize}) {
      if (p != rank) out.push_back(static_cast<int>(p));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Heartbeats: a HERE frame (this rank's operation, as if asked) to every neighbour on every open
// connection, every fifth of the peer silence, so a live neighbour is heard on every working rail
// several times per window; then the neighbours silent for a whole window are judged. Its own
// thread: the reader thread waits while a round reads for itself, and a round may wait long for a
// late peer. A full socket is skipped (the rail is dying; others carry it).
void ControlMesh::beat() {
  const auto every = std::max(peerSilence_ / 5, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(beatMu_);
  while (!beatCv_.wait_for(lock, every, [this] { return stop_.load(); })) {
    lock.unlock();
    const uint64_t sent = sendToPeers(encodeMeshFrame(kMeshHere, 0, opsStarted_.load()), watched_);
    judgeNeighbours();
    lock.lock();
    ++beats_;
    heartbeatsSent_ += sent;
  }
}

bool ControlMesh::verdictHolds(int peer, int64_t now) const {
  const int64_t at = verdictAt_[peer];
  const int64_t life = kVerdictLifeSilences *
                       std::chrono::duration_cast<std::chrono::nanoseconds>(peerSilence_).count();
  // Hearing the peer directly, on any rail, after the verdict came proves it reachable from here.
  return at != 0 && lastHeard_[peer]->load() <= at && now - at < life;
}

// A neighbour silent for the window gets a verdict flooded, unless a flood on it left this rank
// less than a window ago (another watcher's, passed on, or this rank's own): one flood per
// window while it stays silent keeps the verdicts alive everywhere. A peer not heard yet is not
// judged: it may still be connecting its rails (its mesh starts beating only once it has every
// connection, seconds after ours on a loaded host at scale) — unless every connection to it has
// closed, which is its process gone. Bytes waiting unread are hearing it: the reader is behind,
// not the peer (`now` is taken before the look, so what arrived by then counts).
void ControlMesh::judgeNeighbours() {
  const int64_t now = nowNs(),
                window = std::chrono::duration_cast<std::chrono::nanoseconds>(peerSilence_).count();
  const std::vector<char> waiting = inputWaiting(watched_);
  std::vector<char> open(size_, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int p : neighbours_) open[p] = peerReachable(p);
  }
  std::vector<int> silent;
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    for (int p : neighbours_) {
      const int64_t heard = lastHeard_[p]->load();
      if (!attachedOnce_[p] || waiting[p] || (heard == 0 && open[p])) continue;
      if (now - heard < window) continue;
      if (floodedAt_[p] != 0 && now - floodedAt_[p] < window) continue;
      verdictAt_[p] = floodedAt_[p] = now;
      silent.push_back(p);
    }
  }
  for (int p : silent) floodVerdict(p, static_cast<uint32_t>(rank_), -1);
}

// A verdict's copies reach a rank by several paths within milliseconds: the first is taken and
// passed on, the rest (within half a window) stop here, so the flood ends. One that comes later
// is a watcher's refresh: taken and passed on again.
void ControlMesh::takeVerdict(int peer, uint32_t watcher, int from) {
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    const int64_t now = nowNs(),
                  window =
                      std::chrono::duration_cast<std::chrono::nanoseconds>(peerSilence_).count();
    if (floodedAt_[peer] != 0 && now - floodedAt_[peer] < window / 2) return;
    verdictAt_[peer] = floodedAt_[peer] = now;
  }
  ++verdictsTaken_;
  floodVerdict(peer, watcher, from);
}

// To every neighbour but the silent peer (it cannot hear it, and must not fail itself) and the
// rank it came from, on every rail: any rail that still joins two ranks carries it. Without
// waiting for room: a rank that misses it still has its own copies from other paths.
void ControlMesh::floodVerdict(int peer, uint32_t watcher, int except) {
  std::vector<char> to = watched_;
  to[peer] = 0;
  if (except >= 0) to[except] = 0;
  verdictsSent_ += sendToPeers(encodeMeshSilent(static_cast<uint64_t>(peer), watcher), to);
}

std::vector<int> ControlMesh::silentPeers() const {
  std::vector<int> silent;
  if (peerSilence_.count() == 0) return silent;
  const int64_t now = nowNs(),
                window = std::chrono::duration_cast<std::chrono::nanoseconds>(peerSilence_).count();
  std::lock_guard<std::mutex> lock(verdictMu_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // Only a neighbour's silence means anything here: other peers do not beat to this rank; one
    // not heard yet is still starting (judgeNeighbours floods a verdict once it is gone).
    const int64_t heard = lastHeard_[p]->load();
    const bool heardNothing = watched_[p] && heard != 0 && now - heard >= window;
    if (heardNothing || verdictHolds(p, now)) silent.push_back(p);
  }
  return silent;
}

ControlMesh::HeartbeatStats ControlMesh::heartbeatStats() const {
  HeartbeatStats st;
  {
    std::lock_guard<std::mutex> lock(beatMu_);
    st.beats = beats_;
    st.heartbeatsSent = heartbeatsSent_;
  }
  st.verdictsSent = verdictsSent_.load();
  st.verdictsTaken = verdictsTaken_.load();
  return st;
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
    // A connection just made proves a peer heard before alive; one never heard is still
    // starting until its first frame (its silence is not judged before).
    if (lastHeard_[p]->load() != 0) lastHeard_[p]->store(nowNs());
  }
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    for (const auto& c : fresh) attachedOnce_[c->peer] = 1;
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
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why = failedWith_;
  }
  // Before the close, on the same connections: a peer reads why this rank leaves before it
  // reads that it left, and names the round's cause instead of this rank.
  if (!why.empty()) sendEverywhere(why, true);
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

std::vector<char> ControlMesh::inputWaiting(const std::vector<char>& peers) const {
  std::vector<std::shared_ptr<Conn>> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : conns_) {
      if (!c->closed && peers[c->peer]) snapshot.push_back(c);
    }
  }
  std::vector<struct pollfd> pfds;
  for (const auto& c : snapshot) pfds.push_back({c->fd.get(), POLLIN, 0});
  std::vector<char> waiting(size_, 0);
  if (pfds.empty() || ::poll(pfds.data(), pfds.size(), 0) <= 0) return waiting;
  for (size_t i = 0; i < snapshot.size(); ++i) {
    if (pfds[i].revents != 0) waiting[snapshot[i]->peer] = 1;
  }
  return waiting;
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

uint64_t ControlMesh::sendToPeers(const std::string& frame, const std::vector<char>& to) {
  std::vector<std::shared_ptr<Conn>> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot = conns_;
  }
  std::lock_guard<std::mutex> lock(sendMu_);
  uint64_t whole = 0;
  for (auto& c : snapshot) {
    if (!c->closed && to[c->peer] && writeFrame(*c, frame, false)) ++whole;
  }
  return whole;
}

bool ControlMesh::sendPrimary(const std::string& frame, int peer) {
  std::shared_ptr<Conn> first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      if (!c->closed && c->peer == peer && (!first || c->rail < first->rail)) first = c;
    }
  }
  if (!first) return false;
  std::lock_guard<std::mutex> lock(sendMu_);
  return writeFrame(*first, frame, false);
}

void ControlMesh::notifyRailDown(int rail, uint64_t generation) {
  if (size_ > 1)
    sendEverywhere(encodeMeshFrame(kMeshRailDown, static_cast<uint16_t>(rail), generation), false);
}

int64_t ControlMesh::nowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void ControlMesh::ask(const std::vector<int>& peers, uint64_t op) {
  const std::string frame = encodeMeshFrame(kMeshWhere, 0, op);
  for (int p : peers) sendEverywhere(frame, false, p);
}

bool ControlMesh::peersBehind(uint64_t op) {
  // Only peers with a control connection can be asked (the start-up set); one outside it is not
  // waited for (it would never answer) and is not taken for late.
  std::vector<int> asked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && peerOpsStarted_[p]->load() < op + 1 && peerReachable(p)) asked.push_back(p);
    }
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
    // Behind, unless it waits in a round this rank skipped: a round-free operation it failed
    // and this rank finished (the black-holed cold rail of the NCCL plugin's message heads: the
    // peer's abort of the rail never arrives, and both waited until the hole closed).
    if (peerOpsStarted_[p]->load() < op + 1 && peerRound_[p] <= finished_) return true;
  }
  return false;
}

std::vector<int> ControlMesh::peersNotStarted() const {
  const uint64_t started = opsStarted_.load();  // the current operation + 1
  std::vector<int> behind;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peerOpsStarted_[p]->load() < started) behind.push_back(p);
  }
  return behind;
}

ControlMesh::AgreementStats ControlMesh::agreementStats() const {
  AgreementStats st;
  st.rounds = rounds_.load();
  st.messages = messages_.load();
  st.resentCopies = resentCopies_.load();
  st.abortsSent = abortsSent_.load();
  return st;
}

int ControlMesh::targetOf(int step) const {
  return static_cast<int>((rank_ + (int64_t{1} << step)) % size_);
}

int ControlMesh::sourceOf(int step) const {
  const int64_t back = (int64_t{1} << step) % size_;
  return static_cast<int>((rank_ - back + size_) % size_);
}

void ControlMesh::maxReduce(std::vector<double>& values, std::chrono::milliseconds timeout) {
  if (size_ == 1) return;
  const uint64_t round = ++round_;
  std::unique_lock<std::mutex> reading(readMu_);
  const auto deadline = Clock::now() + timeout;
  std::vector<double> acc = values;
  for (int step = 0; step < steps_; ++step) {
    const std::string frame = encodeMeshStep(round, static_cast<uint16_t>(step), acc);
    StepChase chase;
    chase.step = step;
    chase.source = sourceOf(step);
    chase.target = targetOf(step);
    chase.start = Clock::now();
    chase.resendAt = chase.start + kResendAfter;
    // The source is asked where it is every quarter of the silence window; one that has not
    // answered anything for the whole window is unreachable.
    chase.askEvery = std::max(silence_ / 4, std::chrono::milliseconds(1));
    chase.nextAsk = chase.start + chase.askEvery;
    chase.everywhere = sendStep(round, step, frame);
    const std::vector<double> got = awaitStep(round, frame, chase, deadline, timeout);
    if (got.size() != acc.size()) {
      failRound(round, step, kMeshAbortConfig, static_cast<uint32_t>(rank_),
                strCat("rank ", chase.source, " sent ", got.size(), " values, this rank ",
                       acc.size(), " (ranks called different collectives?)"));
    }
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = std::max(acc[i], got[i]);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    endRound(round);
  }
  ++rounds_;
  values = std::move(acc);
}

bool ControlMesh::sendStep(uint64_t round, int step, const std::string& frame) {
  bool asked = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sent_[{round, step}] = frame;  // kept for a target that asks again after this rank moved on
    // A target can be one round behind this rank, never two (this rank finished the round
    // before only when every rank had entered it).
    while (!sent_.empty() && sent_.begin()->first.first + 2 < round) sent_.erase(sent_.begin());
    asked = wanted_.erase({round, step}) > 0;
  }
  ++messages_;
  const int target = targetOf(step);
  if (!asked && sendPrimary(frame, target)) return false;
  sendEverywhere(frame, true, target);
  return true;
}

std::vector<double> ControlMesh::awaitStep(uint64_t round, const std::string& frame,
                                           StepChase& chase, Clock::time_point deadline,
                                           std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool justRead = false;
  for (;;) {
    auto& slot = inbox_[round];
    slot.resize(steps_);
    if (slot[chase.step]) return std::move(*slot[chase.step]);
    auto a = aborts_.find(round);
    if (a != aborts_.end() || abortedAfterFinish_) {
      const Abort abort = a != aborts_.end() ? a->second : abortAfterFinish_;
      lock.unlock();
      failRound(round, chase.step, abort.kind, abort.origin, abort.why);
    }
    std::string why = unreachable(chase.source, chase.start);
    if (!why.empty() && !justRead) {
      // Judge on what has arrived: frames (a step, an ABORT before a close) may wait unread
      // when this rank was not scheduled for a while.
      lock.unlock();
      readFor(std::chrono::microseconds(0));
      lock.lock();
      justRead = true;
      continue;
    }
    justRead = false;
    if (why.empty() && Clock::now() >= deadline) {
      why = strCat("no word from rank(s) ", chase.source, " within ", timeout.count(),
                   " ms on any rail (dissemination step ", chase.step + 1, " of ", steps_, ")");
    }
    if (!why.empty()) {
      lock.unlock();
      failRound(round, chase.step, kMeshAbortRail, static_cast<uint32_t>(rank_), why);
    }
    lock.unlock();
    chaseStep(round, frame, chase);
    auto until = std::min(
        deadline, chase.askedAgain ? chase.nextAsk : std::min(chase.nextAsk, chase.resendAt));
    // With heartbeats, look again every beat: a source's silence is judged by the clock.
    if (peerSilence_.count() > 0) until = std::min(until, Clock::now() + peerSilence_ / 5);
    readFor(std::max(std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now()),
                     std::chrono::microseconds(0)));
    lock.lock();
  }
}

// mu_ held. The source's control connections closed on every rail, or nothing heard from it for
// the silence window. With heartbeats its silence is judged at once (a live peer is heard every
// fifth of the window); without, only after the step itself waited the window (the source is
// asked where it is meanwhile; nothing may have come from it since its last step).
std::string ControlMesh::unreachable(int source, Clock::time_point stepStart) const {
  if (!peerReachable(source)) {
    return strCat("rank(s) ", source,
                  " closed their control connections on every rail (process gone, or every rail "
                  "between us failed)");
  }
  // Not heard yet: still connecting its rails (see judgeNeighbours); the close or the round's
  // timeout decide.
  const int64_t heard = lastHeard_[source]->load();
  if (heard == 0) return "";
  const bool beats = peerSilence_.count() > 0;
  const auto window = beats ? peerSilence_ : silence_;
  const int64_t silenceNs = window.count() * 1000000;
  if ((beats || Clock::now() - stepStart >= silence_) && nowNs() - heard >= silenceNs) {
    return strCat(
        "rank(s) ", source, " answered nothing for ", window.count(),
        " ms on any rail (unreachable: every rail between us is down, or the host is gone)");
  }
  return "";
}

void ControlMesh::endRound(uint64_t round) {
  finished_ = std::max(finished_, round);
  inbox_.erase(inbox_.begin(), inbox_.upper_bound(finished_));
  aborts_.erase(aborts_.begin(), aborts_.upper_bound(finished_));
  wanted_.erase(wanted_.begin(), wanted_.lower_bound({finished_ + 1, 0}));
}

void ControlMesh::failRound(uint64_t round, int step, uint32_t kind, uint32_t origin,
                            const std::string& why) {
  // Best effort and without waiting for room: the peers that miss it still fail by their own
  // wait (a source gone or silent, or the timeout), only later — or by closeAll's copy.
  const std::string abort = encodeMeshAbort(round, origin, kind, why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    endRound(round);
    if (failedWith_.empty()) failedWith_ = abort;
  }
  if (origin == static_cast<uint32_t>(rank_)) {
    // To every peer this rank has a control connection to; they flood it on (dispatch).
    abortsSent_ += floodAbort(abort, -1);
  } else {
    for (int s = step + 1; s < steps_; ++s) {
      sendEverywhere(abort, false, targetOf(s));
      ++abortsSent_;
    }
  }
  const std::string what =
      origin == static_cast<uint32_t>(rank_)
          ? strCat("agreement round ", round, ": ", why)
          : strCat("agreement round ", round, ": rank ", origin, " failed it: ", printable(why));
  if (kind == kMeshAbortConfig) throw ConfigError(what);
  throw RailError(-1, what);
}

// mu_ not held. After kResendAfter the step goes out on every rail and its source is asked to
// send its copy again (RESEND) on every rail; every quarter of the silence window the source is
// asked again, and where it is.
void ControlMesh::chaseStep(uint64_t round, const std::string& frame, StepChase& chase) {
  const auto now = Clock::now();
  const bool firstResend = !chase.askedAgain && now >= chase.resendAt;
  if (firstResend && !chase.everywhere) {
    sendEverywhere(frame, true, chase.target);
    chase.everywhere = true;
    ++resentCopies_;
  }
  if (firstResend || now >= chase.nextAsk) {
    sendEverywhere(encodeMeshFrame(kMeshResend, static_cast<uint16_t>(chase.step), round), false,
                   chase.source);
    chase.askedAgain = true;
  }
  if (now >= chase.nextAsk) {
    ask({chase.source}, opsStarted_.load());
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
      auto it = sent_.find({seq, f.step});
      if (it != sent_.end()) {
        frame = it->second;
      } else if (seq > finished_) {
        wanted_.insert({seq, f.step});  // not reached yet: it goes out on every rail when it is
      }
    }
    if (!frame.empty()) {
      sendEverywhere(frame, false, c.peer);
      ++resentCopies_;
    }
    return;
  }
  if (type == kMeshWhere) {
    sendEverywhere(encodeMeshFrame(kMeshHere, 0, opsStarted_.load()), false, c.peer);
    return;
  }
  if (type == kMeshSilent) {
    if (peerSilence_.count() > 0) takeVerdict(static_cast<int>(seq), f.origin, c.peer);
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
  std::string passOn;  // an ABORT new here, flooded on once the lock is let go
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq <= finished_) {
      // A late copy (a slower rail), or an abort of a round ended here. That abort is news: its
      // ranks failed for good (a rank killed inside the round can leave some ranks with the
      // result, others with the error), so the round after cannot complete anywhere.
      if (type == kMeshAbort && !abortedAfterFinish_) {
        passOn = encodeMeshAbort(seq, f.origin, f.kind, f.why);
        abortAfterFinish_ = Abort{f.origin, f.kind, std::move(f.why)};
        abortedAfterFinish_ = true;
        cv_.notify_all();
      }
    } else if (type == kMeshAbort) {
      peerRound_[c.peer] = std::max(peerRound_[c.peer], seq);
      const std::string frame = encodeMeshAbort(seq, f.origin, f.kind, f.why);
      if (aborts_.emplace(seq, Abort{f.origin, f.kind, std::move(f.why)}).second) passOn = frame;
      cv_.notify_all();
    } else {
      peerRound_[c.peer] = std::max(peerRound_[c.peer], seq);
      auto& slot = inbox_[seq];
      slot.resize(steps_);
      if (!slot[f.step]) slot[f.step] = std::make_unique<std::vector<double>>(std::move(f.values));
      cv_.notify_all();
    }
  }
  // Control connections join only the start-up set (transport/peer_set.h), not every pair, so
  // an ABORT reaches the ranks that are not the origin's neighbours by flooding, like a verdict:
  // each rank passes the first copy it takes (per round, and the first after a round ended
  // here) to its other peers once; later copies stop. Every rank then fails its round, or its
  // next one, with the origin's cause, as if the origin had reached it directly.
  if (!passOn.empty()) abortsSent_ += floodAbort(passOn, c.peer);
}

uint64_t ControlMesh::floodAbort(const std::string& frame, int except) {
  std::vector<char> to(size_, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : conns_) {
      if (!c->closed && c->peer != except) to[c->peer] = 1;
    }
  }
  sendToPeers(frame, to);
  return static_cast<uint64_t>(std::count(to.begin(), to.end(), 1));
}

// Why a well-formed frame cannot come from this peer in this job (empty when it can): a round
// too far ahead, a step this world size does not have or that another rank sends, an abort
// naming a rank that does not exist, a verdict naming no third rank of this job.
std::string ControlMesh::misfit(const Conn& c, const MeshFrame& f) {
  if (f.type == kMeshSilent) {
    // Nobody passes a verdict on a rank to that rank, and a rank does not judge itself: the
    // named rank must be a third rank of this job.
    const uint64_t peer = f.seq;
    if (peer >= static_cast<uint64_t>(size_) || f.origin >= static_cast<uint32_t>(size_) ||
        peer == static_cast<uint64_t>(rank_) || peer == static_cast<uint64_t>(c.peer) ||
        peer == f.origin) {
      return strCat("verdict on rank ", peer, " by rank ", f.origin, " (world of ", size_, ")");
    }
    return "";
  }
  if (f.type != kMeshStep && f.type != kMeshResend && f.type != kMeshAbort) return "";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (f.seq > finished_ + kMaxRoundsAhead) return strCat("round ", f.seq, " too far ahead");
  }
  if (f.type == kMeshAbort) {
    return f.origin < static_cast<uint32_t>(size_) ? "" : strCat("abort from rank ", f.origin);
  }
  if (f.step >= steps_) return strCat("step ", f.step, " of a ", steps_, "-step round");
  const int from = f.type == kMeshStep ? sourceOf(f.step) : targetOf(f.step);
  if (c.peer != from) {
    return strCat(f.type == kMeshStep ? "step " : "resend of step ", f.step, " from rank ", c.peer,
                  " (expected from rank ", from, ")");
  }
  return "";
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
    if (got == MeshDecode::kFrame) bad = misfit(c, f);
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
