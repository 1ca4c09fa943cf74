#include "failover/watchdog.h"

#include <algorithm>

#include "base/error.h"

namespace nezha {

RailWatchdog::RailWatchdog(std::vector<std::string> railNames, std::chrono::milliseconds window,
                           double slowFactor)
    : names_(std::move(railNames)), window_(window), slowFactor_(slowFactor) {
  for (size_t i = 0; i < names_.size(); ++i) rails_.push_back(std::make_unique<Rail>());
}

void RailWatchdog::beginAttempt(const std::vector<int>& tasksPerRail) {
  const int64_t now = ns(Clock::now());
  for (size_t r = 0; r < rails_.size(); ++r) {
    Rail& rail = *rails_[r];
    rail.pending = tasksPerRail[r];
    rail.inAttempt = tasksPerRail[r] > 0;
    rail.verdict = kNone;
    rail.lastActivityNs = now;
  }
}

void RailWatchdog::taskDone(int rail) {
  Rail& r = *rails_[rail];
  r.lastActivityNs = ns(Clock::now());
  r.pending.fetch_sub(1);
}

std::string RailWatchdog::check(int rail, Clock::time_point lastProgress,
                                Clock::time_point taskStart, double predictedSeconds) {
  Rail& me = *rails_[rail];
  // lastProgress may predate this slice (bytes last arrived in an earlier one): for "did another
  // rail move after this one?" the slice's start counts as this rail's latest activity; for "did
  // anything arrive at all?" (black hole vs slow, below) only real arrivals count.
  const int64_t arrived = ns(lastProgress);
  const int64_t mine = std::max(arrived, ns(taskStart));
  int64_t seen = me.lastActivityNs.load();
  while (seen < mine && !me.lastActivityNs.compare_exchange_weak(seen, mine)) {
  }
  if (!enabled()) return "";
  const auto now = Clock::now();
  bool others = false, othersDone = true;
  int64_t othersDoneAt = 0;  // when the last other rail finished (valid if othersDone)
  std::string movedOn;
  int64_t movedAt = 0;  // when that rail moved (its latest activity, after this rail's last)
  // Another rail counts as moving when it finished its part after this rail last moved, or moved
  // data within the last half window: all rails standing still together (a peer that has not
  // reached this operation yet) is not this rail's fault.
  const int64_t recent = ns(now) - std::chrono::nanoseconds(window_).count() / 2;
  for (size_t q = 0; q < rails_.size(); ++q) {
    if (static_cast<int>(q) == rail || !rails_[q]->inAttempt) continue;
    others = true;
    const bool finished = rails_[q]->pending.load() == 0;
    if (!finished) othersDone = false;
    const int64_t theirs = rails_[q]->lastActivityNs.load();
    othersDoneAt = std::max(othersDoneAt, theirs);
    if (movedOn.empty() && theirs > mine && (finished || theirs >= recent)) {
      movedOn = names_[q];
      movedAt = theirs;
    }
  }
  if (!others) return "";
  // The silence counts from the moment another rail was first seen moving after this one went
  // quiet (that rail's activity, not this check's time): a peer that arrives late starts every
  // rail at once, and this rail's bytes follow. It is never later than the moment the slow check
  // counts from (the last other rail finishing), and the window never exceeds the slow budget, so
  // a rail that moves nothing at all (black hole) is always judged stalled, not slow.
  if (movedOn.empty()) {
    me.quietSinceProgressNs = -1;
  } else if (me.quietSinceProgressNs != mine) {
    me.quietSinceProgressNs = mine;
    me.othersMovingSinceNs = movedAt;
  }
  const auto stalled = movedOn.empty()
                           ? std::chrono::milliseconds(0)
                           : std::chrono::duration_cast<std::chrono::milliseconds>(
                                 now - Clock::time_point(Clock::duration(me.othersMovingSinceNs)));
  if (stalled >= window_) {
    me.verdict = kStalled;
    return strCat("watchdog: nothing moved on this rail for ", stalled.count(), " ms while rail ",
                  movedOn, " moved data");
  }
  // Counted from when the operation started waiting on this rail alone (the last other rail
  // finished), not from the slice's start: a peer that arrived late held every rail equally.
  const auto waitingSince = std::max(taskStart, Clock::time_point(Clock::duration(othersDoneAt)));
  const auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(now - waitingSince);
  const auto budget = std::max(window_, std::chrono::milliseconds(static_cast<int64_t>(
                                            1000 * std::min(slowFactor_ * predictedSeconds, 1e6))));
  if (!othersDone || ran < budget) return "";
  // The operation has waited on this rail alone for its whole budget. Whether it is slow (gray:
  // still moving) or stopped (black hole) is told by its own arrivals, not by the clock since the
  // others finished: a rank may take in the tail of a step just after the others finished and
  // then nothing more.
  const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(
      now - Clock::time_point(Clock::duration(arrived)));
  if (quiet >= window_) {
    me.verdict = kStalled;
    return strCat("watchdog: nothing moved on this rail for ", quiet.count(),
                  " ms; every other rail finished ", ran.count(), " ms ago");
  }
  if (quiet <= window_ / 2) {
    me.verdict = kSlow;
    return strCat("slow: a slice predicted at ", static_cast<int64_t>(predictedSeconds * 1000),
                  " ms still runs ", ran.count(), " ms after every other rail finished");
  }
  return "";
}

}  // namespace nezha
