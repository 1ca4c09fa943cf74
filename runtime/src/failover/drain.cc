// Drain and restore: an operator takes a rail out of the split (connections kept) or gives it
// back, from the control endpoint of any rank. A request only marks the rail on this rank; the
// per-operation round carries it to every rank, so every rank applies it at the same operation
// (failover_engine.h, the round's "drain" and "restore" fields).
#include <algorithm>

#include "failover/failover_engine.h"

namespace nezha {

void FailoverEngine::applyControl(const std::vector<double>& agreed) {
  const size_t n = rails_.size();
  std::vector<bool> alive = sched_->alive();
  bool changed = false;
  for (size_t r = 0; r < n; ++r) {
    const bool drain = agreed[r] > 0, restore = agreed[n + r] > 0;
    int mine = controlRequest_[r]->load();
    // The last rail in the split is never drained: the job would have nothing to run on.
    if (drain && alive[r] && std::count(alive.begin(), alive.end(), true) > 1) {
      alive[r] = false;
      drained_[r] = true;
      changed = true;
      metrics_.drains.push_back(railEvent(static_cast<int>(r), "operator"));
    } else if (restore && drained_[r] && !localDown_[r]) {
      alive[r] = true;
      drained_[r] = false;
      changed = true;
      metrics_.restores.push_back(railEvent(static_cast<int>(r), "operator"));
    }
    // Requests seen by the agreement are done (applied, or moot); clear only those.
    const int drainAsked = static_cast<int>(Request::kDrain);
    const int restoreAsked = static_cast<int>(Request::kRestore);
    if ((mine == drainAsked && drain) || (mine == restoreAsked && restore)) {
      controlRequest_[r]->compare_exchange_strong(mine, 0);
    }
  }
  if (changed) sched_->setAlive(alive);
}

// A rail's state as /status reports it (the operator's prober reads it).
std::string FailoverEngine::railState(size_t r) const {
  const bool alive = sched_ ? sched_->alive()[r] : true;
  if (alive) return "healthy";
  if (drained_.size() > r && drained_[r]) return "drained";
  if (o_.worldSize > 1 && (rebuilding(static_cast<int>(r)) || readyLocally(static_cast<int>(r)))) {
    return "probing";  // being rebuilt and probed, or ready to be once every rank agrees
  }
  return "failed";
}

}  // namespace nezha
