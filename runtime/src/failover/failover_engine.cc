// The failover engine's operation path: running an operation's slices on their rails and
// finishing it exactly when a rail breaks (failover_engine.h has the whole design).
//
// With Options::failover every operation ends with a failure agreement on the control mesh:
// each rank max-reduces per-rail failure flags (1 = a slice on that rail failed here, or the
// rail's link is known down here or on a peer). A rail flagged by any rank leaves the split on
// all ranks at the same operation; the slices it carried are redone on the survivors from the
// preserved inputs; slices on unflagged rails completed on every rank, so their results stand.
// The agreement travels on every rail at once (control_mesh.h), so a cut during the round
// cannot leave ranks in different rounds. A rank that loses a rail's link tells its peers at
// once over the other rails, so they drop the rail in milliseconds instead of waiting for
// their progress deadline.
#include "failover/failover_engine.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "base/error.h"
#include "base/socket.h"
#include "failover/signed_channel.h"
#include "transport/progress_guard.h"

namespace nezha {

namespace {
// Large slices run as chunks of about this size, in order on their rail's thread. When a rail
// breaks, the chunks every rank finished stand and only the rest is redone, so a replay costs
// about one chunk on the survivors instead of the failed rail's whole share. A chunk costs a
// ring's start-up (a few round trips), under 1% at this size on these rails.
constexpr size_t kChunkBytes = 4 << 20;
constexpr size_t kMaxChunksPerSlice = 16;
// Every 16th operation holds its round even when it could skip it (round-free operations).
constexpr uint64_t kConfirmEvery = 16;

std::vector<Slice> chunked(const std::vector<Slice>& slices, size_t unitBytes) {
  std::vector<Slice> out;
  for (const Slice& s : slices) {
    const size_t bytes = s.count * unitBytes;
    size_t k = std::min(kMaxChunksPerSlice, std::max<size_t>(1, bytes / kChunkBytes));
    k = std::min(k, std::max<size_t>(1, s.count));
    for (size_t i = 0; i < k; ++i) {
      const size_t b = s.count * i / k, e = s.count * (i + 1) / k;
      if (e > b || s.count == 0) out.push_back(Slice{s.rail, s.offset + b, e - b});
    }
  }
  return out;
}

// Failover reasons from least to most specific: the agreed reason is the most specific any rank
// saw (a peer's "peer" or "error" says less than its neighbour's "watchdog" or "carrier").
constexpr const char* kReasons[] = {"peer", "error", "watchdog", "slow", "transport", "carrier"};

int reasonRank(const std::string& reason) {
  for (int i = 0; i < static_cast<int>(std::size(kReasons)); ++i) {
    if (reason == kReasons[i]) return i;
  }
  return 0;
}

std::string reasonName(int rank) {
  return rank >= 0 && rank < static_cast<int>(std::size(kReasons)) ? kReasons[rank] : "peer";
}
}  // namespace

FailoverEngine::FailoverEngine(const Options& options, std::vector<RailInfo>& rails,
                               Metrics& metrics, TransportFactory makeTransport)
    : o_(options), rails_(rails), metrics_(metrics), makeTransport_(std::move(makeTransport)) {
  const size_t nr = rails_.size();
  for (size_t i = 0; i < nr; ++i) {
    workers_.push_back(std::make_unique<RailWorker>());
    linkDown_.push_back(std::make_unique<std::atomic<bool>>(false));
    reportedDownBy_.push_back(std::make_unique<std::atomic<int>>(0));
    suspectedAt_.push_back(std::make_unique<std::atomic<int64_t>>(0));
    linkUpAt_.push_back(std::make_unique<std::atomic<int64_t>>(0));
    generation_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
    controlRequest_.push_back(std::make_unique<std::atomic<int>>(0));
  }
  faultWhy_.assign(nr, std::string());
  rebuilds_.assign(nr, nullptr);
  std::vector<std::string> names;
  for (const auto& r : rails_) names.push_back(r.name);
  watchdog_ = std::make_unique<RailWatchdog>(names, o_.watchdog, o_.slowFactor);
  scratch_.resize(nr);
  localDown_.assign(nr, false);
  failedAt_.assign(nr, Clock::time_point{});
  holdDown_.assign(nr, o_.readmitHoldDown);
  drained_.assign(nr, false);
  reprobed_.assign(nr, false);
  retrying_.assign(nr, false);
}

FailoverEngine::~FailoverEngine() = default;

void FailoverEngine::adoptChannels(std::vector<std::unique_ptr<Channel>> channels,
                                   const std::vector<bool>& usable) {
  NEZHA_ENFORCE(channels.size() == rails_.size() && usable.size() == rails_.size(),
                "adoptChannels: one channel and one usable flag per rail");
  std::lock_guard<std::mutex> lock(channelMu_);
  channels_ = std::move(channels);
  for (size_t i = 0; i < usable.size(); ++i) {
    if (!usable[i]) localDown_[i] = true;
  }
}

void FailoverEngine::setJob(const JobTable& job, const AlgoOptions& algo) {
  job_ = job;
  algo_ = algo;
}

void FailoverEngine::recordDownAtStart(int rail, const std::string& why,
                                       const std::vector<int>& ranks, const std::string& reason) {
  opStart_ = Clock::now();
  recordFailover(rail, why, ranks, reason);
}

void FailoverEngine::beginOp(uint64_t op) {
  checkUsable();
  opStart_ = Clock::now();
  currentOp_ = op;
  signature_.clear();
  if (agreement_) agreement_->setCurrentOp(op);
}

void FailoverEngine::abortRail(int rail) {
  std::lock_guard<std::mutex> lock(channelMu_);
  if (static_cast<size_t>(rail) < channels_.size()) channels_[rail]->abort();
}

// The operation a failover or re-admission record names: the kept one while it is redone.
uint64_t FailoverEngine::eventOpNumber() const {
  return eventOp_ >= 0 ? static_cast<uint64_t>(eventOp_) : currentOp_;
}

void FailoverEngine::failStop(const RailError& e) {
  if (failure_.empty()) {
    failure_ = e.what();
    failureRail_ = e.rail();
  }
  for (auto& ch : channels_) ch->abort();
  if (agreement_)
    agreement_->closeAll();  // peers waiting in a round with this rank fail now, not later
  throw e;
}

void FailoverEngine::checkUsable() const {
  if (failure_.empty()) return;
  throw RailError(failureRail_, strCat("communicator is unusable after an earlier rail failure (",
                                       failure_, "); build a new one"));
}

void FailoverEngine::runOn(int rail, const std::function<void(Channel&, Scratch&)>& fn) {
  TaskHandle h;
  const std::function<void()> task = [&] { fn(*channels_[rail], scratch_[rail]); };
  if (!workers_[rail]->runHere(task, &h)) workers_[rail]->submit(task, &h);
  try {
    h.wait();
  } catch (const RailError& e) {
    failStop(e);
  }
}

void FailoverEngine::agree(std::vector<double>& v, std::chrono::milliseconds timeout) {
  try {
    agreement_->maxReduce(v, timeout);
  } catch (const RailError& e) {
    // A round nobody can answer means no rail joins this rank to a peer any more: the same
    // error, with the same wording, as when a collective's last rail fails.
    allRailsDown({e.what()});
  } catch (const Error&) {
    for (auto& ch : channels_) ch->abort();
    if (failure_.empty()) failure_ = "ranks disagreed";
    throw;
  }
}

void FailoverEngine::shutRail(int rail) {
  if (localDown_[rail]) return;
  localDown_[rail] = true;
  channels_[rail]->abort();
}

std::string FailoverEngine::railError(int rail, const std::string& what) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(channelMu_);
    why = faultWhy_[rail];
  }
  if (!why.empty()) {
    why = strCat(rails_[rail].transport, " transport: ", why);
  } else if (linkDown_[rail]->load()) {
    why = strCat("link of ", rails_[rail].iface, " went down");
  } else if (int by = reportedDownBy_[rail]->load(); by > 0) {
    why = strCat("rank ", by - 1, " lost the link of rail ", rails_[rail].name);
  }
  // The transport's own message is then only the echo of this rank aborting the rail.
  return why.empty() ? what : why;
}

void FailoverEngine::onLinkDown(size_t rail) {
  if (linkDown_[rail]->exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(channelMu_);
    channels_[rail]->abort();  // thread-safe: fails the rail's exchange in flight now
  }
  if (agreement_) agreement_->notifyRailDown(static_cast<int>(rail), generation_[rail]->load());
}

void FailoverEngine::onTransportFault(size_t rail, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(channelMu_);
    faultWhy_[rail] = why;
    if (rail < channels_.size()) channels_[rail]->abort();  // else: reported while connecting
  }
  if (agreement_) agreement_->notifyRailDown(static_cast<int>(rail), generation_[rail]->load());
}

void FailoverEngine::onLinkUp(size_t rail) {
  if (!linkDown_[rail]->exchange(false)) return;
  linkUpAt_[rail]->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count());
}

void FailoverEngine::onPeerRailDown(int peer, int rail, uint64_t gen) {
  // A notice about connections this rank already replaced says nothing about the current ones.
  if (gen != generation_[rail]->load()) return;
  reportedDownBy_[rail]->store(peer + 1);
  std::lock_guard<std::mutex> lock(channelMu_);
  channels_[rail]->abort();
}

void FailoverEngine::recordFailover(int rail, const std::string& localError,
                                    const std::vector<int>& ranks, const std::string& reason) {
  FailoverEvent ev = railEvent(rail, reason);
  ev.ranks = ranks;
  ev.stallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opStart_).count();
  ev.localError = localError;
  metrics_.failovers.push_back(ev);
  failedAt_[rail] = std::chrono::steady_clock::now();
  metrics_.rails[rails_[rail].name].alive = false;
  // A finding of silence on the rail: the watchdog's verdict, this rank's own progress deadline
  // (transport/progress_guard.h's words), or its peer's, reported in the round (no error here:
  // a sender whose bytes the socket buffers took sees nothing of a black hole; its receiver
  // does). Not a carrier loss, a slow rail, an abort or a closed connection seen here.
  const bool silence =
      reason == "watchdog" ||
      ((reason == "error" || reason == "peer") &&
       (localError.empty() || localError.find(kNoProgressPrefix) != std::string::npos));
  if (silence && silenceListener_) silenceListener_(rail);
  if (o_.verbose) {
    std::fprintf(stderr, "nezha: rank %d: rail %s left the split at op %llu (%s: %s)\n", o_.rank,
                 ev.rail.c_str(), static_cast<unsigned long long>(ev.op), reason.c_str(),
                 localError.empty() ? "reported by a peer" : localError.c_str());
  }
}

// One word for why this rank saw the rail fail (FailoverEvent::reason).
std::string FailoverEngine::failoverReason(int rail, const std::string& localError) const {
  if (linkDown_[rail]->load() || reportedDownBy_[rail]->load() > 0) return "carrier";
  switch (watchdog_->verdict(rail)) {
    case RailWatchdog::kStalled:
      return "watchdog";
    case RailWatchdog::kSlow:
      return "slow";
    case RailWatchdog::kNone:
      break;
  }
  {
    std::lock_guard<std::mutex> lock(channelMu_);
    if (!faultWhy_[rail].empty()) return "transport";
  }
  return localError.empty() ? "peer" : "error";
}

// This rank's own detector fired for the rail: its link went down, or its transport reported a
// fault. Read again when the rail is retired, not only when the attempt ended: a rank that had
// finished its part (its last bytes still in flight to a peer) waits in the round when its link
// drops, and its notice is what makes the peer fail the rail. At the round's end the event has
// therefore reached this rank, and the record must name it, not end up naming no rank.
bool FailoverEngine::ownDetectorFired(int rail) const {
  if (linkDown_[rail]->load()) return true;
  std::lock_guard<std::mutex> lock(channelMu_);
  return !faultWhy_[rail].empty();
}

// Rails whose link this rank sees down now: the watcher's flag, or the carrier read afresh (a
// link event may still be on its way when a round times out).
std::vector<int> FailoverEngine::ownLinksDown() const {
  std::vector<int> down;
  for (size_t r = 0; r < rails_.size(); ++r) {
    const bool carrierLost = !rails_[r].iface.empty() && !linkHasCarrier(rails_[r].iface);
    if (linkDown_[r]->load() || carrierLost) down.push_back(static_cast<int>(r));
  }
  return down;
}

// Every way of losing the last rail ends here, so every rank reports it in one message family:
// "operation N failed: no rail left to finish it on (<cause>)". A rank whose own links are all
// down says so and names them, whichever detector fired first (link event, slice deadline,
// silent round); a rank that only sees silence names the silent peers and the rails it tried.
void FailoverEngine::allRailsDown(const std::vector<std::string>& errors) {
  std::string cause;
  const std::vector<int> own = ownLinksDown();
  if (!rails_.empty() && own.size() == rails_.size()) {
    for (int r : own) {
      cause += strCat(cause.empty() ? "" : ", ", rails_[r].name, " (", rails_[r].iface, ")");
    }
    cause = strCat("every link of this rank is down: ", cause);
  } else {
    for (const std::string& e : errors) {
      if (!e.empty()) cause += strCat(cause.empty() ? "" : "; ", e);
    }
    std::string tried;
    for (size_t r = 0; r < rails_.size(); ++r) {
      if (std::find(own.begin(), own.end(), static_cast<int>(r)) == own.end()) {
        tried += strCat(tried.empty() ? "" : ", ", rails_[r].name);
      }
    }
    if (cause.empty()) cause = "every rail failed or was shut";
    if (!tried.empty()) cause += strCat(" [rails tried: ", tried, "]");
  }
  const uint64_t op = eventOpNumber();
  failStop(RailError(
      -1, strCat("operation ", op, " failed: no rail left to finish it on (", cause, ")")));
}

// One attempt: every slice of `todo` submitted to its rail's thread, then waited for. Rail
// failures are collected per rail (the first error message kept); a bug check ends the
// communicator.
FailoverEngine::Attempt FailoverEngine::runAttempt(const Plan& plan, const std::vector<Slice>& todo,
                                                   const SliceFn& fn, Outcome& out) {
  const size_t n = rails_.size();
  const uint64_t op = eventOpNumber();
  // A peer that has not reached this operation yet (busy elsewhere) is not a dead rail.
  std::function<bool()> peersBehind = [this, op] {
    const bool behind = agreement_->peersBehind(op);
    if (behind && o_.verbose) {  // the slice waits on past its deadline: worth seeing in a trace
      std::fprintf(stderr,
                   "nezha: rank %d: op %llu silent past its deadline, a peer not in it yet\n",
                   o_.rank, static_cast<unsigned long long>(op));
    }
    return behind;
  };
  Attempt at;
  at.failed.assign(n, 0.0);
  at.errors.assign(n, std::string());
  at.leadingDone.assign(n, 0);
  at.longest = o_.progressFloor;
  std::vector<TaskHandle> handles(todo.size());
  std::vector<int> tasksPerRail(n, 0);
  for (const Slice& s : todo) ++tasksPerRail[s.rail];
  watchdog_->beginAttempt(tasksPerRail);
  for (size_t i = 0; i < todo.size(); ++i) {
    const Slice s = todo[i];
    const size_t bytes = s.count * plan.unitBytes;
    const auto deadline = progressDeadline(s.rail, bytes);
    const double predicted = sched_->predictSeconds(s.rail, bytes);
    at.longest = std::max(at.longest, deadline);
    std::function<void()> task = [&, s, deadline, predicted] {
      struct Done {  // counted even when the slice throws
        RailWatchdog& w;
        int rail;
        ~Done() { w.taskDone(rail); }
      } done{*watchdog_, s.rail};
      Channel& ch = *channels_[s.rail];
      const auto start = Clock::now();
      ch.setProgressTimeout(deadline);
      ch.setPeersStillComing(peersBehind);
      ch.setProgressWatch([this, rail = s.rail, start, predicted, op](Clock::time_point moved) {
        std::string why = watchdog_->check(rail, moved, start, predicted);
        if (why.empty()) why = silentPeerVerdict(moved, start);
        return why.empty() ? suspectedRailVerdict(rail, moved, start, op) : why;
      });
      fn(ch, scratch_[s.rail], s);
      ch.setProgressWatch(nullptr);
    };
    // The last slice runs on this thread when its rail is idle (always, for a one-rail
    // operation): this thread only waits otherwise, and a hand-off costs two wake-ups.
    const bool lastSlice = i + 1 == todo.size();
    if (!lastSlice || !workers_[s.rail]->runHere(task, &handles[i])) {
      workers_[s.rail]->submit(std::move(task), &handles[i]);
    }
  }
  std::exception_ptr bug;  // a non-rail failure (a bug check) ends the communicator
  for (size_t i = 0; i < todo.size(); ++i) {
    const int r = todo[i].rail;
    try {
      handles[i].wait();
      out.secs[r] += handles[i].seconds();
      if (at.failed[r] == 0) ++at.leadingDone[r];
    } catch (const RailError& e) {
      if (at.failed[r] == 0) at.errors[r] = railError(r, e.what());
      at.failed[r] = 1;
    } catch (const MismatchError& e) {
      if (at.failed[r] == 0) at.errors[r] = e.what();
      at.failed[r] = 1;
      if (!at.mismatch) {
        at.mismatch = std::current_exception();
        for (auto& ch : channels_) ch->abort();  // the peers' slices fail now, not at a deadline
      }
    } catch (...) {
      if (!bug) bug = std::current_exception();
    }
  }
  if (at.mismatch && !o_.failover) {  // no round to tell the peers: what this rank saw
    if (failure_.empty()) failure_ = "the ranks called different operations";
    std::rethrow_exception(at.mismatch);
  }
  if (bug) {
    for (auto& ch : channels_) ch->abort();
    if (failure_.empty()) failure_ = "an internal error";
    std::rethrow_exception(bug);
  }
  return at;
}

// A slice that moved nothing for the peer silence while some peer was heard on no rail for as
// long (control-mesh heartbeats: by this rank if it watches that peer, else by a rank that does,
// whose verdict was flooded here) waits for a peer that cannot be reached: the rail fails now
// instead of after its progress deadline and a question nobody answers. Both must hold, so a
// peer that is only late (its heartbeats arrive) is waited for as before.
std::string FailoverEngine::silentPeerVerdict(Clock::time_point moved,
                                              Clock::time_point start) const {
  if (!agreement_ || agreement_->peerSilence().count() == 0) return "";
  const auto quiet = Clock::now() - std::max(moved, start);
  if (quiet < agreement_->peerSilence()) return "";
  const std::vector<int> silent = agreement_->silentPeers();
  if (silent.empty()) return "";
  std::string who;
  for (int p : silent) who += strCat(who.empty() ? "" : ", ", p);
  return strCat("rank(s) ", who, " heard on no rail for ", agreement_->peerSilence().count(),
                " ms by this rank or the ranks that watch them (heartbeats lost: every rail to "
                "them is down, or the host is gone)");
}

void FailoverEngine::suspectRail(size_t rail) {
  suspectedAt_[rail]->store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// A slice quiet for kSuspectQuiet on a rail another engine of this process found silent within
// kSuspectFor, counted from the later of its own start, its last movement and that finding, and
// only while the peer is in this operation (a peer still busy elsewhere moves nothing either).
std::string FailoverEngine::suspectedRailVerdict(int rail, Clock::time_point moved,
                                                 Clock::time_point start, uint64_t op) const {
  const int64_t at = suspectedAt_[rail]->load();
  if (at == 0) return "";
  const Clock::time_point suspected{std::chrono::nanoseconds(at)};
  const auto now = Clock::now();
  if (now - suspected > kSuspectFor) return "";
  if (now - std::max({moved, start, suspected}) < kSuspectQuiet) return "";
  if (agreement_ && agreement_->peersBehind(op)) return "";
  return strCat("moved nothing for ", kSuspectQuiet.count(),
                " ms after another connection of this process found the rail silent");
}

// Deadline from the split table's prediction with a floor, so a slow rail is not taken for a
// dead one.
std::chrono::milliseconds FailoverEngine::progressDeadline(int rail, size_t bytes) const {
  const double predicted = sched_->predictSeconds(rail, bytes);
  return std::max(o_.progressFloor,
                  std::chrono::milliseconds(static_cast<int64_t>(4000 * std::min(predicted, 1e6))));
}

// A rail whose link is known down (here or on a peer) leaves now even if this operation did not
// use it, so the next one is not planned onto it.
void FailoverEngine::flagKnownDownRails(Attempt& at) {
  for (size_t r = 0; r < rails_.size(); ++r) {
    const int ri = static_cast<int>(r);
    if (at.failed[r] == 0 && sched_->alive()[r] &&
        (linkDown_[r]->load() || reportedDownBy_[r]->load() > 0)) {
      at.failed[r] = 1;
      at.errors[r] = railError(ri, "");
    }
    if (at.failed[r] > 0) shutRail(ri);
  }
  // Saw it here: own link down, or a slice failed for a reason other than a peer's notice.
  at.sawHere.assign(rails_.size(), 0.0);
  for (size_t r = 0; r < rails_.size(); ++r) {
    at.sawHere[r] = linkDown_[r]->load() || (at.failed[r] > 0 && reportedDownBy_[r]->load() == 0);
  }
}

// The per-operation round. Its vector, per rail: [failed | not ready to rebuild | drain asked
// | restore asked | -chunks done | rebuild failed here | rebuild not done here]. Drain/restore
// come from this rank's control endpoint; the max of -done is minus the number of leading
// chunks finished on every rank. Afterwards at.failed holds the agreed failures,
// at.doneEverywhere the chunks that stand, at.ready the rails to start rebuilding and
// at.rebuild* the agreed state of rails being rebuilt.
void FailoverEngine::agreeOnAttempt(Attempt& at, bool patient) {
  const size_t n = rails_.size();
  constexpr size_t kFields = 7;
  std::vector<double> round = at.failed;
  round.resize(kFields * n + 1, 1.0);
  // Last: minus this rank's operation number (the max is minus the oldest any rank is in).
  const uint64_t current = currentOp_;
  round[kFields * n] = -static_cast<double>(current);
  for (size_t r = 0; r < n; ++r) {
    round[4 * n + r] = -static_cast<double>(at.leadingDone[r]);
    const int req = controlRequest_[r]->load();
    round[2 * n + r] = req == static_cast<int>(Request::kDrain) ? 1.0 : 0.0;
    round[3 * n + r] = req == static_cast<int>(Request::kRestore) ? 1.0 : 0.0;
    const int ri = static_cast<int>(r);
    if (!sched_->alive()[r] && !drained_[r] && !rebuilding(ri) && readyLocally(ri)) {
      round[n + r] = 0;
    }
    rebuildFlags(r, round[5 * n + r], round[6 * n + r]);
  }
  const size_t signedAt = round.size();
  if (!signature_.empty()) putSignature(round, at);
  try {
    // Peers still blocked on a silent rail reach the round up to their longest deadline late.
    agreement_->maxReduce(round, patient ? std::max(o_.ioTimeout, at.longest + 2 * o_.progressFloor)
                                         : at.longest + 2 * o_.progressFloor);
  } catch (const RailError& e) {
    at.errors.push_back(e.what());
    allRailsDown(at.errors);
  }
  if (!signature_.empty()) checkSignatures(round, signedAt);
  at.ready.clear();
  for (size_t r = 0; r < n; ++r) {
    if (round[n + r] == 0 && round[r] == 0) at.ready.push_back(static_cast<int>(r));
  }
  applyControl(std::vector<double>(round.begin() + 2 * n, round.begin() + 4 * n));
  at.doneEverywhere.assign(n, 0);
  for (size_t r = 0; r < n; ++r) at.doneEverywhere[r] = static_cast<size_t>(-round[4 * n + r]);
  at.rebuildFailed.assign(round.begin() + 5 * n, round.begin() + 6 * n);
  at.rebuildNotDone.assign(round.begin() + 6 * n, round.begin() + 7 * n);
  at.failed.assign(round.begin(), round.begin() + n);
  at.minOp = static_cast<uint64_t>(-round[kFields * n]);
}

namespace {
constexpr size_t kSignatureWords = kOpSignatureBytes / 4;
constexpr size_t kSignatureSlot = 2 + kSignatureWords;
}  // namespace

void FailoverEngine::putSignature(std::vector<double>& round, const Attempt& at) const {
  const size_t base = round.size();
  round.resize(base + kSignatureSlot * o_.worldSize, 0.0);
  double* mine = &round[base + kSignatureSlot * o_.rank];
  mine[0] = at.mismatch ? 1.0 : 0.0;
  mine[1] = static_cast<double>(currentOp_ + 1);
  for (size_t w = 0; w < kSignatureWords; ++w) {
    uint32_t word = 0;
    for (size_t b = 0; b < 4; ++b) {
      word |= uint32_t(static_cast<uint8_t>(signature_[4 * w + b])) << (8 * b);
    }
    mine[2 + w] = word;
  }
}

// Every rank's slot after the round: the same on every rank, so a mismatch that some rank saw
// in its headers, or signatures that differ although no header showed it (a rank whose
// exchange failed first), end the operation on every rank with the same MismatchError. Ranks
// in different operations without a mismatch seen are a kept operation's redo, not a
// disagreement (the round's minOp handles them).
void FailoverEngine::checkSignatures(const std::vector<double>& round, size_t at) {
  const size_t world = static_cast<size_t>(o_.worldSize);
  std::vector<std::string> signatures(world);
  std::vector<int64_t> ops(world, -1);
  bool seen = false, sameOp = true, differ = false;
  for (size_t p = 0; p < world; ++p) {
    const double* slot = &round[at + kSignatureSlot * p];
    seen = seen || slot[0] > 0;
    ops[p] = static_cast<int64_t>(slot[1]) - 1;
    for (size_t w = 0; w < kSignatureWords; ++w) {
      const uint32_t word = static_cast<uint32_t>(slot[2 + w]);
      for (size_t b = 0; b < 4; ++b) signatures[p].push_back(static_cast<char>(word >> (8 * b)));
    }
    sameOp = sameOp && ops[p] == ops[0];
    differ = differ || signatures[p] != signatures[0];
  }
  if (!seen && !(sameOp && differ)) return;
  const std::string why = describeMismatch(currentOp_, signatures, ops);
  if (failure_.empty()) failure_ = why;
  for (auto& ch : channels_) ch->abort();
  throw MismatchError(why, signatures, ops);
}

// Rails that leave the split: which ranks saw each fail themselves and the most specific reason
// any rank saw (one more round, held only when a rail leaves), then a failover record per rail
// that is the same on every rank.
void FailoverEngine::retireRails(const std::vector<int>& leaving, Attempt& at) {
  const size_t k = leaving.size(), world = static_cast<size_t>(o_.worldSize);
  std::vector<double> who(world * k + k, 0.0);
  for (size_t j = 0; j < k; ++j) {
    const bool saw = at.sawHere[leaving[j]] > 0 || ownDetectorFired(leaving[j]);
    who[o_.rank * k + j] = saw ? 1.0 : 0.0;
    who[world * k + j] = reasonRank(failoverReason(leaving[j], at.errors[leaving[j]]));
  }
  try {
    agreement_->maxReduce(who, 2 * o_.progressFloor);
  } catch (const RailError& e) {
    at.errors.push_back(e.what());
    allRailsDown(at.errors);
  }
  for (size_t j = 0; j < k; ++j) {
    std::vector<int> ranks;
    for (int p = 0; p < o_.worldSize; ++p) {
      if (who[p * k + j] > 0) ranks.push_back(p);
    }
    recordFailover(leaving[j], at.errors[leaving[j]], ranks,
                   reasonName(static_cast<int>(who[world * k + j])));
  }
}

FailoverEngine::Outcome FailoverEngine::runSlices(const Plan& plan, const SliceFn& fn,
                                                  std::unique_ptr<Kept>* next) {
  Outcome out;
  out.secs.assign(rails_.size(), 0.0);
  std::vector<Slice> todo = chunked(plan.slices, plan.unitBytes);
  if (todo.empty()) return out;  // nothing ran, so no round is held
  std::vector<Slice> later = laterWaves(todo);
  Attempt at = runAttempt(plan, todo, fn, out);
  if (!o_.failover) {
    for (size_t r = 0; r < rails_.size(); ++r) {
      if (at.failed[r] > 0) failStop(RailError(static_cast<int>(r), at.errors[r]));
    }
    out.done = todo;
    return out;
  }
  const bool mayKeep = next != nullptr && *next != nullptr && later.empty();
  if (mayKeep && std::none_of(at.failed.begin(), at.failed.end(), [](double f) { return f > 0; })) {
    // Done here without a round. Finishing it needed every rank's part, so every peer finished
    // the previous operation: that one is confirmed and this one is kept in its place.
    out.done = std::move(todo);
    kept_ = std::move(*next);
    ++metrics_.roundFreeOps;
    return out;
  }
  const bool patient = mayKeep || kept_ != nullptr;
  out.restart =
      !finish(plan, fn, std::move(todo), std::move(at), out, patient, false, std::move(later));
  return out;
}

std::vector<Slice> FailoverEngine::laterWaves(std::vector<Slice>& todo) const {
  std::vector<Slice> later;
  if (!o_.failover || o_.readmitHoldDown.count() == 0 || o_.waveBytes == 0) return later;
  // Whole chunks per rail per wave (Options::waveBytes, 8 MiB: an eighth of a 64 MiB slice);
  // the round after a wave costs well under a millisecond.
  const size_t waveChunks = std::max<size_t>(1, o_.waveBytes / kChunkBytes);
  bool mayReturn = false;
  for (size_t r = 0; r < rails_.size(); ++r) {
    if (!sched_->alive()[r] && !drained_[r]) mayReturn = true;
  }
  if (!mayReturn) return later;
  std::vector<size_t> taken(rails_.size(), 0);
  std::vector<Slice> wave;
  for (const Slice& s : todo) (taken[s.rail]++ < waveChunks ? wave : later).push_back(s);
  todo = std::move(wave);
  return later;
}

namespace {
// Adjacent element ranges merged (by offset), so a re-split of the rest of an operation makes
// a few large slices rather than a piece of every chunk on every rail.
std::vector<Slice> merged(std::vector<Slice> slices) {
  std::sort(slices.begin(), slices.end(),
            [](const Slice& a, const Slice& b) { return a.offset < b.offset; });
  std::vector<Slice> out;
  for (const Slice& s : slices) {
    if (!out.empty() && out.back().offset + out.back().count == s.offset) {
      out.back().count += s.count;
    } else {
      out.push_back(s);
    }
  }
  return out;
}
}  // namespace

void FailoverEngine::moveReadmissions(const Attempt& agreed) {
  reapAbandoned();
  advanceRebuilds(agreed.rebuildFailed, agreed.rebuildNotDone);
  std::vector<int> start;
  for (int r : agreed.ready) {
    if (!sched_->alive()[r] && !rebuilding(r)) start.push_back(r);
  }
  if (!start.empty()) {
    startRebuilds(start);
    settleQuickRebuilds();
  }
}

bool FailoverEngine::finish(const Plan& plan, const SliceFn& fn, std::vector<Slice> todo,
                            Attempt at, Outcome& out, bool patient, bool agreedAlready,
                            std::vector<Slice> later) {
  const size_t n = rails_.size();
  Attempt agreed;  // the last round's re-admission flags
  for (bool first = true;; first = false) {
    if (!(first && agreedAlready)) {
      flagKnownDownRails(at);
      // With every link of this rank down nobody can be reached: no round to wait for.
      if (std::all_of(linkDown_.begin(), linkDown_.end(),
                      [](const auto& d) { return d->load(); })) {
        allRailsDown(at.errors);
      }
      agreeOnAttempt(at, patient);
      if (kept_ && at.minOp <= kept_->op) {
        // A peer is still in the kept operation: it failed there while this rank finished it.
        // Redo it with that peer (same agreed round, same plan, so the same slices everywhere),
        // writing the redone result aside; the caller's operation then starts afresh.
        std::unique_ptr<Kept> k = std::move(kept_);
        k->out.resize(k->outBytes);
        Outcome redo;
        redo.secs.assign(n, 0.0);
        eventOp_ = static_cast<int64_t>(k->op);
        ++metrics_.keptRedos;
        finish(k->plan, k->make(k->in.data(), k->out.data()),
               chunked(k->plan.slices, k->plan.unitBytes), at, redo, true, true);
        eventOp_ = -1;
        return false;
      }
      kept_.reset();  // every rank is past it
    }
    agreed.ready = at.ready;
    agreed.rebuildFailed = at.rebuildFailed;
    agreed.rebuildNotDone = at.rebuildNotDone;
    // Chunks on unflagged rails, and a flagged rail's leading chunks done on every rank, stand.
    std::vector<Slice> redo;
    std::vector<size_t> index(n, 0);  // chunk's position on its rail
    for (const Slice& s : todo) {
      const bool stands = at.failed[s.rail] == 0 || index[s.rail]++ < at.doneEverywhere[s.rail];
      (stands ? out.done : redo).push_back(s);
    }
    std::vector<bool> alive = sched_->alive();
    std::vector<int> leaving;
    for (size_t r = 0; r < n; ++r) {
      if (at.failed[r] == 0 || !alive[r]) continue;
      alive[r] = false;
      leaving.push_back(static_cast<int>(r));
      shutRail(static_cast<int>(r));
    }
    if (!leaving.empty()) retireRails(leaving, at);
    if (leaving.empty() && redo.empty() && later.empty()) break;
    // An offload rail (SHARP) alone cannot finish a replay or run anything but allreduce.
    if (!sched_->anyByteRail(alive)) allRailsDown(at.errors);
    sched_->setAlive(alive);
    if (redo.empty() && later.empty()) break;
    if (!redo.empty()) {
      out.replayed = true;
      metrics_.replayedSlices += redo.size();
    }
    if (later.empty()) {
      todo = chunked(sched_->resplit(plan, redo), plan.unitBytes);
    } else {
      // Between waves: a rail agreed ready re-enters now and takes its share of the rest.
      ++metrics_.waveRounds;
      moveReadmissions(agreed);
      agreed.ready.clear();
      agreed.rebuildFailed.assign(n, 0.0);
      agreed.rebuildNotDone.assign(n, 0.0);
      if (sched_->alive() != alive) {
        for (const Slice& s : later) redo.push_back(s);
        later.clear();
        out.replayed = true;  // the rail set changed mid-operation: its timings are no sample
        ++metrics_.midOpReadmissions;
      }
      todo = redo.empty() ? std::vector<Slice>{}
                          : chunked(sched_->resplit(plan, merged(std::move(redo))), plan.unitBytes);
      for (const Slice& s : later) todo.push_back(s);
      later = laterWaves(todo);
    }
    at = runAttempt(plan, todo, fn, out);
  }
  // Re-admission moves on at operation boundaries (and between waves), with the last round's
  // agreed flags.
  moveReadmissions(agreed);
  return true;
}

// Round-free operations (Options::roundFreeBytes). A small cold operation on one rail skips the
// per-operation round when no rail is being drained: its result stands on this rank as soon as
// its exchange finishes here. A rail that is out (failed, agreed by every rank) runs none of its
// slices, so it does not stop the others skipping rounds, nor does its rebuild (connect and probe
// on the rail's own thread, started and decided at agreed rounds, so the same on every rank):
// both move at the rounds still held (every kConfirmEvery operations, and every operation that
// is not round-free). Holding a round per operation while a rail was out made the NCCL plugin's
// messages pay two rounds instead of one for as long as the rail stayed out; while it was being
// rebuilt, which behind a black hole is most of the time it is out (each try waits out its
// connect budget), the same: 5-11 % of the plugin's pace on the test bed. A rank that fails one
// aborts the rail, so every peer that finished it fails its next operation on that rail too (that
// one cannot finish without the failed rank) and the next round meets: the round carries each
// rank's operation number, and ranks one operation ahead redo the kept operation with the ones
// behind (from kept inputs, on the survivors), then run their own operation again from a fresh
// plan. Before anything that could leave a peer's data waiting on another rail (a split, another
// rail, a broadcast, a timing agreement) and every kConfirmEvery operations, a round confirms the
// kept operation. A rank that finished an operation is never more than one ahead of one that did
// not: finishing the next one needs every rank's part.
bool FailoverEngine::roundFree(OpKind op, const Plan& plan, bool twoWay) const {
  if (!o_.failover || o_.worldSize < 2 || plan.hot || plan.slices.size() != 1) return false;
  if (!twoWay && op != OpKind::kAllreduce && op != OpKind::kAllgather &&
      op != OpKind::kReduceScatter) {
    return false;  // a broadcast root finishes without its peers; barriers are rare
  }
  if (plan.units * plan.unitBytes > o_.roundFreeBytes) return false;
  if (currentOp_ % kConfirmEvery == 0) return false;
  if (sched_->isOffload(plan.slices[0].rail)) return false;
  const std::vector<bool>& alive = sched_->alive();
  for (size_t r = 0; r < rails_.size(); ++r) {
    if ((!alive[r] && !localDown_[r]) || drained_[r]) return false;
  }
  return continuesKept(plan) || !kept_;
}

bool FailoverEngine::continuesKept(const Plan& plan) const {
  if (!kept_) return false;
  const int rail = kept_->plan.slices[0].rail;
  if (plan.slices.empty()) return false;  // runs nothing, so it would not meet a failed peer
  return std::all_of(plan.slices.begin(), plan.slices.end(),
                     [rail](const Slice& s) { return s.rail == rail; });
}

void FailoverEngine::confirmKept() {
  if (!kept_) return;
  Attempt at;
  at.failed.assign(rails_.size(), 0.0);
  at.errors.assign(rails_.size(), std::string());
  at.leadingDone.assign(rails_.size(), 0);
  at.longest = o_.progressFloor;
  Outcome out;
  out.secs.assign(rails_.size(), 0.0);
  finish(Plan{}, nullptr, {}, std::move(at), out, true);
}

// Every slice of a signed operation runs on a SignedChannel over its rail, numbered with the
// operation it belongs to (a kept one keeps its number for its redo).
FailoverEngine::MakeSliceFn FailoverEngine::signedMake(const MakeSliceFn& make) const {
  if (signature_.empty()) return make;
  return [make, op = currentOp_, sig = signature_](const char* in, char* out) -> SliceFn {
    return [fn = make(in, out), op, sig](Channel& ch, Scratch& s, const Slice& sl) {
      SignedChannel signedCh(ch, op, sig);
      fn(signedCh, s, sl);
    };
  };
}

void FailoverEngine::runUnit(const std::function<void(Channel&, Scratch&)>& fn) {
  const SliceFn unit = signedMake([&fn](const char*, char*) -> SliceFn {
    return [&fn](Channel& ch, Scratch& s, const Slice&) { fn(ch, s); };
  })(nullptr, nullptr);
  for (;;) {
    Plan p;
    p.units = 1;
    p.slices.push_back(Slice{sched_->coldRail(), 0, 1});
    if (kept_ && !continuesKept(p)) {
      confirmKept();
      continue;  // the cold rail may have changed
    }
    if (!runSlices(p, unit).restart) return;
  }
}

FailoverEngine::Outcome FailoverEngine::runOp(OpKind op, const std::function<Plan()>& makePlan,
                                              const char* in, size_t inBytes, char* out,
                                              size_t outBytes, bool copyIn,
                                              const MakeSliceFn& makeUnsigned, Plan& plan,
                                              bool twoWay) {
  const MakeSliceFn make = signedMake(makeUnsigned);
  // In place, a run overwrites the inputs a replay (or a second run) needs: they are copied
  // first, once, and every run reads the copy.
  std::vector<char> preserved;
  for (;;) {
    plan = makePlan();
    if (kept_ && !continuesKept(plan)) {
      confirmKept();
      plan = makePlan();  // the confirmation may have changed the rail set
    }
    const char* from = preserved.empty() ? in : preserved.data();
    std::unique_ptr<Kept> next;
    const char* src = from;
    if (roundFree(op, plan, twoWay)) {
      next = std::make_unique<Kept>();
      next->op = currentOp_;
      next->plan = plan;
      next->in.assign(from, from + inBytes);
      next->outBytes = outBytes;
      next->make = make;
      src = next->in.data();
    } else if (copyIn) {
      if (preserved.empty()) preserved.assign(in, in + inBytes);
      src = preserved.data();
    }
    Outcome ran = runSlices(plan, make(src, out), &next);
    if (!ran.restart) return ran;
    if (copyIn && preserved.empty() && next) preserved = std::move(next->in);
  }
}

}  // namespace nezha
