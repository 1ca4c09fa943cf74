#include "transport/progress_guard.h"

#include <algorithm>

#include "base/error.h"

namespace nezha {

void ProgressGuard::start() {
  last_ = Clock::now();
  waitedForPeer_ = false;
  graceUntil_ = {};
}

std::chrono::milliseconds ProgressGuard::timeout() const {
  return progressTimeout_.count() > 0 ? std::min(progressTimeout_, ioTimeout_) : ioTimeout_;
}

int ProgressGuard::waitMs() const {
  auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline() - Clock::now());
  if (watch_) wait = std::min(wait, std::chrono::milliseconds(Channel::kProgressWatchTick));
  return static_cast<int>(std::max<int64_t>(0, wait.count()));
}

std::string ProgressGuard::judge(bool progressed, bool receiving,
                                 const std::function<std::string()>& waiting) {
  if (progressed) moved();
  if (watch_) {
    std::string why = watch_(receiving ? lastArrival_ : last_);
    if (!why.empty()) return why;
  }
  const auto now = Clock::now();
  if (progressed || now < deadline()) return {};
  if (now - last_ < ioTimeout_ && peersStillComing_) {
    // A peer still on its way to this operation is not the rail's fault; once it arrived it
    // gets one full deadline of its own before silence counts against the rail.
    if (peersStillComing_()) {
      waitedForPeer_ = true;
      graceUntil_ = Clock::now() + timeout();
      return {};
    }
    if (waitedForPeer_) {
      waitedForPeer_ = false;
      graceUntil_ = Clock::now() + timeout();
      return {};
    }
  }
  return strCat(kNoProgressPrefix, timeout().count(), " ms (waiting:", waiting(), ")");
}

}  // namespace nezha
