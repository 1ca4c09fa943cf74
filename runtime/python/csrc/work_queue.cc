#include "work_queue.h"

#include <ATen/core/jit_type.h>

namespace nezha_torch {

NezhaWork::NezhaWork(int rank, c10d::OpType type, const char* title,
                     std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, title),
      title_(title),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool NezhaWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool NezhaWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_;
}

std::exception_ptr NezhaWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::vector<at::Tensor> NezhaWork::result() { return outputs_; }

bool NezhaWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    TORCH_CHECK(false, "nezha: operation timed out after ", timeout.count(), " ms");
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> NezhaWork::getFuture() { return future_; }

int NezhaWork::sourceRank() const {
  const int src = source_.load();
  TORCH_CHECK(src >= 0, "nezha backend: sourceRank() of an operation that is not a completed recv");
  return src;
}

void NezhaWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
  // Outside the lock: the Future runs its callbacks (DDP's bucket hooks) inline.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

WorkQueue::WorkQueue() : thread_([this] { loop(); }) {}

WorkQueue::~WorkQueue() { stop(); }

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> join(joinMu_);
  if (!thread_.joinable()) return;
  TORCH_CHECK(std::this_thread::get_id() != thread_.get_id(),
              "nezha backend: the process group was shut down from one of its own completion "
              "callbacks; shut it down from another thread");
  thread_.join();
}

void WorkQueue::push(c10::intrusive_ptr<NezhaWork> work, std::function<void()> run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(!stop_, "nezha backend: ", work->title(),
                " on a process group that was shut down (destroy_process_group or interpreter "
                "exit)");
    queue_.emplace_back(std::move(work), std::move(run));
  }
  cv_.notify_one();
}

void WorkQueue::loop() {
  for (;;) {
    std::pair<c10::intrusive_ptr<NezhaWork>, std::function<void()>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.second();
    } catch (...) {
      error = std::current_exception();
    }
    item.first->finish(error);
  }
}

}  // namespace nezha_torch
