#include "base/rail_worker.h"

#include <chrono>
#include <utility>

namespace nezha {

void TaskHandle::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool TaskHandle::waitFor(std::chrono::steady_clock::duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [this] { return done_; });
}

bool TaskHandle::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

RailWorker::RailWorker() : thread_([this] { loop(); }) {}

RailWorker::~RailWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RailWorker::submit(std::function<void()> task, TaskHandle* handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(task), handle);
  }
  cv_.notify_one();
}

bool RailWorker::runHere(const std::function<void()>& task, TaskHandle* handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ || !queue_.empty()) return false;
    running_ = true;
  }
  auto start = std::chrono::steady_clock::now();
  std::exception_ptr error;
  try {
    task();
  } catch (...) {
    error = std::current_exception();
  }
  finish(handle, std::move(error),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  cv_.notify_one();  // a task submitted meanwhile waits for running_
  return true;
}

void RailWorker::finish(TaskHandle* h, std::exception_ptr error, double secs) {
  // Notify under the lock: the waiter may destroy the handle as soon as it sees done_.
  std::lock_guard<std::mutex> lock(h->mu_);
  h->done_ = true;
  // Moved, not copied: the worker keeps no reference, so the exception object is destroyed on
  // the waiter's thread, which also read it (a copy released here raced with the waiter's
  // what() as far as TSan can see: libstdc++'s refcount is not instrumented).
  h->error_ = std::move(error);
  h->seconds_ = secs;
  h->cv_.notify_all();
}

void RailWorker::loop() {
  while (true) {
    std::pair<std::function<void()>, TaskHandle*> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return (stop_ || !queue_.empty()) && !running_; });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      item.first();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
    finish(item.second, std::move(error),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace nezha
