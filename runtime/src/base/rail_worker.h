// One thread per rail, so rails move data concurrently. A rail's tasks run one at a time in
// submission order, which keeps the order of messages identical on every rank, so its channel
// is never touched by two threads at once.
//
// runHere() runs a task on the caller's thread instead when the rail is idle: an operation on
// one rail (every small one) then costs no hand-off, i.e. no two thread wake-ups, which on a busy
// host were most of a 1 KiB allreduce's time and most of its noise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace nezha {

// Completion of one submitted task; wait() rethrows the task's exception.
class TaskHandle {
 public:
  void wait();
  bool done();  // finished (without waiting)
  // Waits up to `d` for the task to finish; true if it did (its error is not rethrown).
  bool waitFor(std::chrono::steady_clock::duration d);
  double seconds() const { return seconds_; }  // task run time (valid after wait)

 private:
  friend class RailWorker;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;         // mu_ held
  std::exception_ptr error_;  // mu_ held
  double seconds_ = 0;
};

class RailWorker {
 public:
  RailWorker();
  ~RailWorker();  // finishes queued tasks, then joins
  RailWorker(const RailWorker&) = delete;
  RailWorker& operator=(const RailWorker&) = delete;

  // `handle` must outlive the task (the caller waits on it).
  void submit(std::function<void()> task, TaskHandle* handle);
  // Runs `task` now on this thread if nothing is queued or running on the rail, with the same
  // bookkeeping as submit() (handle done, error, seconds: handle->wait() returns at once);
  // false (nothing run) otherwise. Later submissions wait until it finishes.
  bool runHere(const std::function<void()>& task, TaskHandle* handle);

 private:
  void loop();
  static void finish(TaskHandle* h, std::exception_ptr error, double secs);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, TaskHandle*>> queue_;  // mu_ held
  bool stop_ = false;                                                // mu_ held
  bool running_ = false;  // a task runs (on the worker or in runHere); mu_ held
  std::thread thread_;
};

}  // namespace nezha
