// The progress watchdog: how failover tells a rail that stopped (black hole: link up, traffic
// dropped) or fell far behind (gray: suddenly many times slower) from one that is merely busy,
// without trusting the carrier. It judges from data movement alone, during an attempt of an
// operation, on the rails' own threads (Channel::setProgressWatch):
//
//   stalled  nothing moved on this rail for `window` while another rail of the same attempt
//            kept moving data (or finished) — counted from the first moment another rail was
//            seen moving after this one went quiet, so ranks arriving late at an operation
//            (which stalls every rail at once) never count;
//   slow     every other rail of the attempt finished its part, and this rail's current slice
//            still runs max(window, slowFactor x its predicted time) after the last of them
//            finished (or after the slice started, if later): the operation waits on it alone.
//            Slow only while bytes still arrive (within half a window); a rail on which nothing
//            arrived for a whole window is stalled instead: stopped (black hole), not slow (gray).
//            In between, the check waits for one or the other.
//
// When no other rail takes part (a cold operation on one rail), neither applies: the slice's
// own no-progress deadline and the control mesh's "is the peer still coming?" decide, as before.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace nezha {

class RailWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  enum Verdict : int { kNone = 0, kStalled = 1, kSlow = 2 };

  RailWatchdog(std::vector<std::string> railNames, std::chrono::milliseconds window,
               double slowFactor);

  // Main thread, before an attempt's tasks are submitted: how many tasks each rail gets.
  void beginAttempt(const std::vector<int>& tasksPerRail);
  // Rail threads.
  void taskDone(int rail);
  // The check for a running task of `rail` (see above); "" = keep going.
  std::string check(int rail, Clock::time_point lastProgress, Clock::time_point taskStart,
                    double predictedSeconds);
  // The last verdict on `rail` in this attempt (for the failover record's reason).
  Verdict verdict(int rail) const { return static_cast<Verdict>(rails_[rail]->verdict.load()); }
  bool enabled() const { return window_.count() > 0; }

 private:
  struct Rail {
    std::atomic<int64_t> lastActivityNs{0};  // bytes moved or a task finished
    std::atomic<int> pending{0};             // tasks of this attempt not finished
    std::atomic<bool> inAttempt{false};
    std::atomic<int> verdict{kNone};
    // The rail's own thread only: the silence being judged (its last progress) and since when
    // another rail was seen moving during it.
    int64_t quietSinceProgressNs = -1;
    int64_t othersMovingSinceNs = 0;
  };
  static int64_t ns(Clock::time_point t) { return t.time_since_epoch().count(); }
  std::vector<std::string> names_;
  std::chrono::milliseconds window_;
  double slowFactor_;
  std::vector<std::unique_ptr<Rail>> rails_;
};

}  // namespace nezha
