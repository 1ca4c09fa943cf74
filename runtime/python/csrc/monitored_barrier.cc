#include "monitored_barrier.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace nezha_torch {

namespace {

using Clock = std::chrono::steady_clock;

// A receive on kMonitoredBarrierTag that the caller can stop waiting for. The posted receive
// stays posted after a timeout (PeerLinks cannot withdraw it), so a late message is consumed
// by it, not by the next barrier's receive.
class Arrival {
 public:
  Arrival(PeerLinks& links, int peer) : state_(std::make_shared<State>()) {
    links.post(peer, kMonitoredBarrierTag,
               [s = state_](int, const std::vector<char>*, std::exception_ptr err) {
                 std::lock_guard<std::mutex> lock(s->mu);
                 s->done = true;
                 s->error = err;
                 s->cv.notify_all();
               });
  }

  // True once the message came by `deadline`; rethrows a broken link's error.
  bool waitUntil(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_until(lock, deadline, [&] { return state_->done; })) return false;
    if (state_->error) std::rethrow_exception(state_->error);
    return true;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
};

std::string ms(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

}  // namespace

void monitoredBarrier(PeerLinks& links, int rank, int size, std::chrono::milliseconds timeout,
                      bool waitAllRanks) {
  if (size == 1) return;
  const Clock::time_point deadline = Clock::now() + timeout;
  const char here = 1;
  if (rank != 0) {
    Arrival release(links, 0);  // posted before this rank announces itself
    links.send(0, kMonitoredBarrierTag, &here, 1);
    if (!release.waitUntil(deadline)) {
      C10_THROW_ERROR(DistBackendError,
                      "nezha backend: rank " + std::to_string(rank) +
                          " reached monitored_barrier, but rank 0 did not release it within " +
                          ms(timeout) + "; rank 0's error names the ranks that did not arrive");
    }
    return;
  }
  std::vector<std::unique_ptr<Arrival>> arrivals;
  for (int p = 1; p < size; ++p) arrivals.push_back(std::make_unique<Arrival>(links, p));
  std::vector<int> missing;
  for (int p = 1; p < size; ++p) {
    if (arrivals[p - 1]->waitUntil(deadline)) continue;
    missing.push_back(p);
    if (!waitAllRanks) break;
  }
  if (!missing.empty()) {
    std::ostringstream why;
    why << "nezha backend: [Rank 0]: " << (missing.size() == 1 ? "Rank " : "Ranks ");
    for (size_t i = 0; i < missing.size(); ++i) why << (i ? ", " : "") << missing[i];
    why << " failed to pass monitoredBarrier in " << ms(timeout)
        << (waitAllRanks ? "" : " (the first one missing; wait_all_ranks=True names all)");
    C10_THROW_ERROR(DistBackendError, why.str());
  }
  for (int p = 1; p < size; ++p) links.send(p, kMonitoredBarrierTag, &here, 1);
}

}  // namespace nezha_torch
