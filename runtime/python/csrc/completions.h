// Where a Work's Future is completed, and so where its then() callbacks run: never on the
// backend's worker thread. A callback may issue a collective on the same group and wait on it
// (torch's PowerSGD hook does: its callback allreduces the P matrices and waits); run on the
// worker, the one thread that would run that collective, it waited forever. ProcessGroupGloo
// has the same contract: futures complete on threads that are not needed to run the
// collective a callback waits for.
//
// Completions run in the order they are posted (the worker's order, the same on every rank),
// one at a time while callbacks return promptly, so collectives issued from callbacks keep
// one order across ranks. A callback that blocks holds its thread: the next completion then
// gets another thread (the pool grows to the deepest nesting ever seen and keeps its threads),
// so the collective the blocked callback waits on still completes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nezha_torch {

class Completions {
 public:
  Completions() = default;
  ~Completions();  // stop()
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Runs `complete` on a completion thread. After stop() it runs on the caller's thread: a
  // late completion (a receive failed at shutdown) still reaches its Future.
  void post(std::function<void()> complete);

  // Runs what was posted, then joins every thread (idempotent; not from a completion thread).
  // Call it without the GIL: the callbacks take it.
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> pending_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
  std::mutex joinMu_;  // concurrent stop() calls join once
};

}  // namespace nezha_torch
