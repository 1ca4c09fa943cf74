// How a transport judges silence inside exchange() (channel.h's contract): the no-progress
// deadline, the grace given to a peer that has not reached the operation yet, and the progress
// watch. Every transport that waits for I/O (tcp/, verbs/) keeps one guard per channel and
// drives it from the rail's thread, so the rules are written once:
//
//   start()            an exchange begins; its silence is counted from now
//   moved()            the exchange moved bytes (the transport decides what counts)
//   arrived()          bytes arrived on the channel: what the watch judges a receiving rail by,
//                      across exchanges (starting an exchange is not progress)
//   waitMs()           how long the next wait for I/O may sleep (the deadline, or one watch tick)
//   judge(...)         after each wait: the reason to fail the rail, or empty to wait on
//
// The deadline is the progress timeout (setTimeout; never above the transport's I/O timeout).
// When it passes with no progress, peersStillComing decides: a peer still on its way gets the
// silence (one more deadline each time it is asked), and once it has arrived it gets one full
// deadline of its own before silence counts against the rail; the whole wait for a late peer is
// bounded by the I/O timeout.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "base/socket.h"
#include "transport/channel.h"

namespace nezha {

// How a rail failed for silence is worded: "no progress for <timeout> ms (waiting: ...)". The
// failover engine tells such a finding from other failures by it.
inline constexpr char kNoProgressPrefix[] = "no progress for ";

class ProgressGuard {
 public:
  explicit ProgressGuard(std::chrono::milliseconds ioTimeout) : ioTimeout_(ioTimeout) {}

  // The Channel setters (channel.h) forward here.
  void setTimeout(std::chrono::milliseconds t) { progressTimeout_ = t; }
  void setPeersStillComing(std::function<bool()> fn) { peersStillComing_ = std::move(fn); }
  void setWatch(Channel::ProgressWatch fn) { watch_ = std::move(fn); }

  void start();
  void moved() { last_ = Clock::now(); }
  void arrived() { lastArrival_ = Clock::now(); }

  // Milliseconds the next wait may sleep: until the deadline, and at most one watch tick while a
  // watch is set, so a stall is judged while it happens. Never negative.
  int waitMs() const;

  // Called after every wait for I/O. `progressed`: the wait ended because something moved
  // (counts as moved()). `receiving`: a receive is still pending, so the watch is shown the last
  // arrival rather than the last movement (a black-holed rail keeps accepting sends into local
  // buffers for a while). `waiting` describes what is still pending for the no-progress
  // message, e.g. " send->1 recv<-2"; only called when the rail fails for silence.
  // Returns why the rail fails now, or empty.
  std::string judge(bool progressed, bool receiving, const std::function<std::string()>& waiting);

  // The no-progress deadline in force: the progress timeout, capped by the I/O timeout.
  std::chrono::milliseconds timeout() const;

 private:
  Clock::time_point deadline() const { return std::max(last_ + timeout(), graceUntil_); }

  const std::chrono::milliseconds ioTimeout_;
  std::chrono::milliseconds progressTimeout_{0};  // 0 = ioTimeout_
  std::function<bool()> peersStillComing_;
  Channel::ProgressWatch watch_;
  // When bytes last arrived (construction until then), across exchanges.
  Clock::time_point lastArrival_ = Clock::now();
  // This exchange: when it last moved, whether the last expiry was a peer still on its way, and
  // the deadline a late peer extended it to.
  Clock::time_point last_ = Clock::now();
  bool waitedForPeer_ = false;
  Clock::time_point graceUntil_{};
};

}  // namespace nezha
