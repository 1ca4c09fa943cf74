#include "completions.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace nezha_torch {

Completions::~Completions() { stop(); }

void Completions::post(std::function<void()> complete) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stop_) {
      pending_.push_back(std::move(complete));
      // Every thread is inside a callback (or there is none yet): one more, or this completion
      // could wait on a callback that waits on it.
      if (idle_ == 0) {
        threads_.emplace_back([this] { loop(); });
      } else {
        lock.unlock();
        cv_.notify_one();
      }
      return;
    }
  }
  complete();
}

void Completions::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    --idle_;
    if (pending_.empty()) return;  // stopping, nothing left
    std::function<void()> complete = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    complete();
    complete = nullptr;  // release what it holds (tensors) before taking the lock again
    lock.lock();
  }
}

void Completions::stop() {
  std::lock_guard<std::mutex> join(joinMu_);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto self = std::this_thread::get_id();
    TORCH_CHECK(std::none_of(threads_.begin(), threads_.end(),
                             [&](const std::thread& t) { return t.get_id() == self; }),
                "nezha backend: the process group was shut down from one of its own completion "
                "callbacks; shut it down from another thread");
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

}  // namespace nezha_torch
