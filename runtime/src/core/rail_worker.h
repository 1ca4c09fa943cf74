// One thread per rail, so rails move data concurrently and each rail's channel is only ever
// touched by its own thread (tasks on a rail run in submission order, which keeps the order of
// messages identical on every rank).
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

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, TaskHandle*>> queue_;  // mu_ held
  bool stop_ = false;                                                // mu_ held
  std::thread thread_;
};

}  // namespace nezha
