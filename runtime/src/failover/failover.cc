// Failover: running an operation's slices on their rails and finishing it exactly when a rail
// breaks.
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
#include <algorithm>
#include <cstdio>

#include "core/communicator_impl.h"
#include "core/error.h"
#include "util/socket.h"

namespace nezha {

using Impl = Communicator::Impl;

namespace {
// Large slices run as chunks of about this size, in order on their rail's thread. When a rail
// breaks, the chunks every rank finished stand and only the rest is redone, so a replay costs
// about one chunk on the survivors instead of the failed rail's whole share. A chunk costs a
// ring's start-up (a few round trips), under 1% at this size on these rails.
constexpr size_t kChunkBytes = 4 << 20;
constexpr size_t kMaxChunksPerSlice = 16;

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
}  // namespace

void Impl::failStop(const RailError& e) {
  if (failure.empty()) {
    failure = e.what();
    failureRail = e.rail();
  }
  for (auto& ch : channels) ch->abort();
  if (mesh) mesh->closeAll();  // peers waiting in a round with this rank fail now, not later
  throw e;
}

void Impl::checkUsable() const {
  if (failure.empty()) return;
  throw RailError(failureRail, strCat("communicator is unusable after an earlier rail failure (",
                                      failure, "); build a new one"));
}

void Impl::runOn(int rail, const std::function<void(Channel&, Scratch&)>& fn) {
  TaskHandle h;
  workers[rail]->submit([&] { fn(*channels[rail], scratch[rail]); }, &h);
  try {
    h.wait();
  } catch (const RailError& e) {
    failStop(e);
  }
}

void Impl::agree(std::vector<double>& v, std::chrono::milliseconds timeout) {
  try {
    mesh->maxReduce(v, timeout);
  } catch (const RailError& e) {
    // A round nobody can answer means no rail joins this rank to a peer any more: the same
    // error, with the same wording, as when a collective's last rail fails.
    allRailsDown({e.what()});
  } catch (const Error&) {
    for (auto& ch : channels) ch->abort();
    if (failure.empty()) failure = "ranks disagreed";
    throw;
  }
}

void Impl::shutRail(int rail) {
  if (localDown[rail]) return;
  localDown[rail] = true;
  channels[rail]->abort();
}

std::string Impl::railError(int rail, const std::string& what) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(channelMu);
    why = faultWhy[rail];
  }
  if (!why.empty()) {
    why = strCat(rails[rail].transport, " transport: ", why);
  } else if (linkDown[rail]->load()) {
    why = strCat("link of ", rails[rail].iface, " went down");
  } else if (int by = reportedDownBy[rail]->load(); by > 0) {
    why = strCat("rank ", by - 1, " lost the link of rail ", rails[rail].name);
  }
  // The transport's own message is then only the echo of this rank aborting the rail.
  return why.empty() ? what : why;
}

void Impl::onLinkDown(size_t rail) {
  if (linkDown[rail]->exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(channelMu);
    channels[rail]->abort();  // thread-safe: fails the rail's exchange in flight now
  }
  if (mesh) mesh->notifyRailDown(static_cast<int>(rail), generation[rail]->load());
}

void Impl::onTransportFault(size_t rail, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(channelMu);
    faultWhy[rail] = why;
    if (rail < channels.size()) channels[rail]->abort();  // else: reported while connecting
  }
  if (mesh) mesh->notifyRailDown(static_cast<int>(rail), generation[rail]->load());
}

void Impl::onLinkUp(size_t rail) {
  if (!linkDown[rail]->exchange(false)) return;
  linkUpAt[rail]->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count());
}

void Impl::onPeerRailDown(int peer, int rail, uint64_t gen) {
  // A notice about connections this rank already replaced says nothing about the current ones.
  if (gen != generation[rail]->load()) return;
  reportedDownBy[rail]->store(peer + 1);
  std::lock_guard<std::mutex> lock(channelMu);
  channels[rail]->abort();
}

void Impl::recordFailover(int rail, const std::string& localError, const std::vector<int>& ranks) {
  FailoverEvent ev;
  ev.ranks = ranks;
  ev.op = opCounter ? opCounter - 1 : 0;
  ev.rail = rails[rail].name;
  ev.unixSeconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ev.stallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opStart).count();
  ev.localError = localError;
  metrics.failovers.push_back(ev);
  failedAt[rail] = std::chrono::steady_clock::now();
  metrics.rails[rails[rail].name].alive = false;
  if (o.verbose) {
    std::fprintf(stderr, "nezha: rank %d: rail %s left the split at op %llu (%s)\n", o.rank,
                 ev.rail.c_str(), static_cast<unsigned long long>(ev.op),
                 localError.empty() ? "reported by a peer" : localError.c_str());
  }
}

// Rails whose link this rank sees down now: the watcher's flag, or the carrier read afresh (a
// link event may still be on its way when a round times out).
std::vector<int> Impl::ownLinksDown() const {
  std::vector<int> down;
  for (size_t r = 0; r < rails.size(); ++r) {
    const bool carrierLost = !rails[r].iface.empty() && !linkHasCarrier(rails[r].iface);
    if (linkDown[r]->load() || carrierLost) down.push_back(static_cast<int>(r));
  }
  return down;
}

// Every way of losing the last rail ends here, so every rank reports it in one message family:
// "operation N failed: no rail left to finish it on (<cause>)". A rank whose own links are all
// down says so and names them, whichever detector fired first (link event, slice deadline,
// silent round); a rank that only sees silence names the silent peers and the rails it tried.
void Impl::allRailsDown(const std::vector<std::string>& errors) {
  std::string cause;
  const std::vector<int> own = ownLinksDown();
  if (!rails.empty() && own.size() == rails.size()) {
    for (int r : own) {
      cause += strCat(cause.empty() ? "" : ", ", rails[r].name, " (", rails[r].iface, ")");
    }
    cause = strCat("every link of this rank is down: ", cause);
  } else {
    for (const std::string& e : errors) {
      if (!e.empty()) cause += strCat(cause.empty() ? "" : "; ", e);
    }
    std::string tried;
    for (size_t r = 0; r < rails.size(); ++r) {
      if (std::find(own.begin(), own.end(), static_cast<int>(r)) == own.end()) {
        tried += strCat(tried.empty() ? "" : ", ", rails[r].name);
      }
    }
    if (cause.empty()) cause = "every rail failed or was shut";
    if (!tried.empty()) cause += strCat(" [rails tried: ", tried, "]");
  }
  failStop(RailError(-1, strCat("operation ", opCounter ? opCounter - 1 : 0,
                                " failed: no rail left to finish it on (", cause, ")")));
}

// One attempt: every slice of `todo` submitted to its rail's thread, then waited for. Rail
// failures are collected per rail (the first error message kept); a bug check ends the
// communicator.
Impl::Attempt Impl::runAttempt(const Plan& plan, const std::vector<Slice>& todo, const SliceFn& fn,
                               Outcome& out) {
  const size_t n = rails.size();
  const uint64_t op = opCounter - 1;
  // A peer that has not reached this operation yet (busy elsewhere) is not a dead rail.
  std::function<bool()> peersBehind = [this, op] { return mesh->peersBehind(op); };
  Attempt at;
  at.failed.assign(n, 0.0);
  at.errors.assign(n, std::string());
  at.leadingDone.assign(n, 0);
  at.longest = o.progressFloor;
  std::vector<TaskHandle> handles(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    const Slice s = todo[i];
    const auto deadline = progressDeadline(s.rail, s.count * plan.unitBytes);
    at.longest = std::max(at.longest, deadline);
    workers[s.rail]->submit(
        [&, s, deadline] {
          Channel& ch = *channels[s.rail];
          ch.setProgressTimeout(deadline);
          ch.setPeersStillComing(peersBehind);
          fn(ch, scratch[s.rail], s);
        },
        &handles[i]);
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
    } catch (...) {
      if (!bug) bug = std::current_exception();
    }
  }
  if (bug) {
    for (auto& ch : channels) ch->abort();
    if (failure.empty()) failure = "an internal error";
    std::rethrow_exception(bug);
  }
  return at;
}

// Deadline from the split table's prediction with a floor, so a slow rail is not taken for a
// dead one.
std::chrono::milliseconds Impl::progressDeadline(int rail, size_t bytes) const {
  const double predicted = sched->predictSeconds(rail, bytes);
  return std::max(o.progressFloor,
                  std::chrono::milliseconds(static_cast<int64_t>(4000 * std::min(predicted, 1e6))));
}

// A rail whose link is known down (here or on a peer) leaves now even if this operation did not
// use it, so the next one is not planned onto it.
void Impl::flagKnownDownRails(Attempt& at) {
  for (size_t r = 0; r < rails.size(); ++r) {
    const int ri = static_cast<int>(r);
    if (at.failed[r] == 0 && sched->alive()[r] &&
        (linkDown[r]->load() || reportedDownBy[r]->load() > 0)) {
      at.failed[r] = 1;
      at.errors[r] = railError(ri, "");
    }
    if (at.failed[r] > 0) shutRail(ri);
  }
  // Saw it here: own link down, or a slice failed for a reason other than a peer's notice.
  at.sawHere.assign(rails.size(), 0.0);
  for (size_t r = 0; r < rails.size(); ++r) {
    at.sawHere[r] = linkDown[r]->load() || (at.failed[r] > 0 && reportedDownBy[r]->load() == 0);
  }
}

// The per-operation round. Its vector, per rail: [failed | not ready to re-admit | drain asked
// | restore asked | -chunks done]. Drain/restore come from this rank's control endpoint; the
// max of -done is minus the number of leading chunks finished on every rank. Afterwards
// at.failed holds the agreed failures and at.doneEverywhere the chunks that stand.
void Impl::agreeOnAttempt(Attempt& at) {
  const size_t n = rails.size();
  std::vector<double> round = at.failed;
  round.resize(5 * n, 1.0);
  for (size_t r = 0; r < n; ++r) {
    round[4 * n + r] = -static_cast<double>(at.leadingDone[r]);
    const int req = controlRequest[r]->load();
    round[2 * n + r] = req == kDrain ? 1.0 : 0.0;
    round[3 * n + r] = req == kRestore ? 1.0 : 0.0;
    if (!sched->alive()[r] && !drained[r] && !readmitting && readyLocally(static_cast<int>(r))) {
      round[n + r] = 0;
    }
  }
  try {
    // Peers still blocked on a silent rail reach the round up to their longest deadline late.
    mesh->maxReduce(round, at.longest + 2 * o.progressFloor);
  } catch (const RailError& e) {
    at.errors.push_back(e.what());
    allRailsDown(at.errors);
  }
  ready.clear();
  for (size_t r = 0; r < n; ++r) {
    if (round[n + r] == 0 && round[r] == 0) ready.push_back(static_cast<int>(r));
  }
  applyControl(std::vector<double>(round.begin() + 2 * n, round.begin() + 4 * n));
  at.doneEverywhere.assign(n, 0);
  for (size_t r = 0; r < n; ++r) at.doneEverywhere[r] = static_cast<size_t>(-round[4 * n + r]);
  at.failed.assign(round.begin(), round.begin() + n);
}

// Rails that leave the split: which ranks saw each fail themselves (one more round, held only
// when a rail leaves), then a failover record per rail.
void Impl::retireRails(const std::vector<int>& leaving, Attempt& at) {
  const size_t k = leaving.size();
  std::vector<double> who(static_cast<size_t>(o.worldSize) * k, 0.0);
  for (size_t j = 0; j < k; ++j) who[o.rank * k + j] = at.sawHere[leaving[j]];
  try {
    mesh->maxReduce(who, 2 * o.progressFloor);
  } catch (const RailError& e) {
    at.errors.push_back(e.what());
    allRailsDown(at.errors);
  }
  for (size_t j = 0; j < k; ++j) {
    std::vector<int> ranks;
    for (int p = 0; p < o.worldSize; ++p) {
      if (who[p * k + j] > 0) ranks.push_back(p);
    }
    recordFailover(leaving[j], at.errors[leaving[j]], ranks);
  }
}

Impl::Outcome Impl::runSlices(const Plan& plan, const SliceFn& fn) {
  Outcome out;
  out.secs.assign(rails.size(), 0.0);
  const size_t n = rails.size();
  std::vector<Slice> todo = chunked(plan.slices, plan.unitBytes);
  while (!todo.empty()) {
    Attempt at = runAttempt(plan, todo, fn, out);
    if (!o.failover) {
      for (size_t r = 0; r < n; ++r) {
        if (at.failed[r] > 0) failStop(RailError(static_cast<int>(r), at.errors[r]));
      }
      out.done = todo;
      return out;
    }
    flagKnownDownRails(at);
    // With every link of this rank down nobody can be reached: no round to wait for.
    if (std::all_of(linkDown.begin(), linkDown.end(), [](const auto& d) { return d->load(); })) {
      allRailsDown(at.errors);
    }
    agreeOnAttempt(at);
    // Chunks on unflagged rails, and a flagged rail's leading chunks done on every rank, stand.
    std::vector<Slice> redo;
    std::vector<size_t> index(n, 0);  // chunk's position on its rail
    for (const Slice& s : todo) {
      const bool stands = at.failed[s.rail] == 0 || index[s.rail]++ < at.doneEverywhere[s.rail];
      (stands ? out.done : redo).push_back(s);
    }
    std::vector<bool> alive = sched->alive();
    std::vector<int> leaving;
    for (size_t r = 0; r < n; ++r) {
      if (at.failed[r] == 0 || !alive[r]) continue;
      alive[r] = false;
      leaving.push_back(static_cast<int>(r));
      shutRail(static_cast<int>(r));
    }
    if (!leaving.empty()) retireRails(leaving, at);
    if (leaving.empty() && redo.empty()) break;
    if (std::none_of(alive.begin(), alive.end(), [](bool a) { return a; })) {
      allRailsDown(at.errors);
    }
    sched->setAlive(alive);
    if (redo.empty()) break;
    out.replayed = true;
    metrics.replayedSlices += redo.size();
    todo = chunked(sched->resplit(plan, redo), plan.unitBytes);
  }
  if (!ready.empty() && !readmitting) readmit(ready);
  return out;
}

void Impl::runUnit(const std::function<void(Channel&, Scratch&)>& fn) {
  Plan p;
  p.units = 1;
  p.slices.push_back(Slice{sched->coldRail(), 0, 1});
  runSlices(p, [&](Channel& ch, Scratch& s, const Slice&) { fn(ch, s); });
}

}  // namespace nezha
