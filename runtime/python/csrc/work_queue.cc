#include "work_queue.h"

#include <ATen/core/jit_type.h>

#include <iterator>
#include <stdexcept>
#include <string>

namespace nezha_torch {

NezhaWork::NezhaWork(int rank, c10d::OpType type, const char* title,
                     std::vector<at::Tensor> outputs, std::shared_ptr<Completions> completions)
    : c10d::Work(rank, type, title),
      title_(title),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      completions_(std::move(completions)) {
  TORCH_INTERNAL_ASSERT(completions_ != nullptr);
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

void NezhaWork::boundWait(std::chrono::milliseconds timeout,
                          std::function<std::string()> describe) {
  groupTimeout_ = timeout;
  describe_ = std::move(describe);
}

bool NezhaWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool byGroup = timeout == kNoTimeout;
  const std::chrono::milliseconds limit = byGroup ? groupTimeout_ : timeout;
  if (limit == kNoTimeout) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
    lock.unlock();
    // The operation itself goes on until libnezha gives up on it (its wait for a late peer is
    // capped by the group's timeout too, backend.cc); the caller is not held that long.
    C10_THROW_ERROR(
        DistBackendError,
        "nezha backend: " + (describe_ ? describe_() : std::string(title_)) + " timed out after " +
            std::to_string(limit.count()) + " ms (" +
            (byGroup ? "the group's timeout, init_process_group(timeout=)" : "wait(timeout)") +
            "); it is abandoned, not cancelled: recreate the process group unless the "
            "late ranks catch up");
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
  // The Future runs its callbacks (DDP's comm hooks) inline when completed, so not here: this
  // is the worker (or a p2p reader), which a callback's own collective may need.
  completions_->post([future = future_, outputs = outputs_, error] {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
  });
}

WorkQueue::WorkQueue(OrderChannel* order) : order_(order), thread_([this] { loop(); }) {}

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

void WorkQueue::push(c10::intrusive_ptr<NezhaWork> work, std::function<void()> run,
                     std::optional<int32_t> priority) {
  TORCH_CHECK(!priority || order_ != nullptr, "nezha backend: ", work->title(),
              " with a priority on a queue that has no scheduling channel (internal error)");
  TORCH_CHECK(!priority || *priority >= 0, "nezha backend: ", work->title(), " priority ",
              *priority, " is negative (want 0..2147483647, higher runs first)");
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(!stop_, "nezha backend: ", work->title(),
                " on a process group that was shut down (destroy_process_group or interpreter "
                "exit)");
    queue_.push_back(Item{nextSeq_++, priority, std::move(work), std::move(run)});
  }
  cv_.notify_one();
}

std::vector<std::pair<uint64_t, int64_t>> WorkQueue::recentOrder() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {started_.begin(), started_.end()};
}

WorkQueue::Item WorkQueue::takePrioritised(std::unique_lock<std::mutex>& lock, bool& announce,
                                           std::exception_ptr& error) {
  if (order_->leader()) {
    // The window: the prioritised operations at the front, up to the first one without a
    // priority (which keeps its place in issue order, as every operation before it does).
    auto best = queue_.begin();
    for (auto it = queue_.begin(); it != queue_.end() && it->priority; ++it) {
      if (*it->priority > *best->priority) best = it;  // ties: the earlier issued
    }
    Item item = std::move(*best);
    queue_.erase(best);
    announce = true;
    return item;
  }
  // Follower: rank 0's decision, then that operation once this rank has issued it.
  lock.unlock();
  uint64_t seq = 0;
  try {
    seq = order_->next();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  auto failFront = [&](std::exception_ptr e) {
    Item item = std::move(queue_.front());
    queue_.pop_front();
    error = e;
    return item;
  };
  if (error) return failFront(error);
  auto find = [&] {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->seq == seq) return it;
    }
    return queue_.end();
  };
  // Pushes only append, and nothing else takes from the queue: wait for seq to be issued.
  cv_.wait(lock, [&] { return find() != queue_.end() || (stop_ && seq >= nextSeq_); });
  auto it = find();
  bool consistent = it != queue_.end();
  for (auto j = queue_.begin(); consistent && j != std::next(it); ++j) {
    consistent = j->priority.has_value();
  }
  if (!consistent) {
    return failFront(std::make_exception_ptr(std::runtime_error(
        "nezha backend: rank 0 scheduled operation #" + std::to_string(seq) + " next, which " +
        (it == queue_.end() ? std::string("this rank never issued")
                            : std::string("comes after an operation without a priority here")) +
        "; ranks must issue the same collectives, with or without a priority, in the same "
        "order")));
  }
  Item item = std::move(*it);
  queue_.erase(it);
  return item;
}

void WorkQueue::loop() {
  for (;;) {
    Item item;
    bool announce = false;
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      if (queue_.front().priority) {
        item = takePrioritised(lock, announce, error);
      } else {
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!error) {
        started_.emplace_back(item.seq, item.priority ? *item.priority : -1);
        if (started_.size() > kOrderLog) started_.pop_front();
      }
    }
    if (announce) {
      try {
        order_->announce(item.seq);
      } catch (...) {
        // The others cannot know what runs next: fail the operation here rather than run a
        // collective they will never join.
        error = std::current_exception();
      }
    }
    if (!error) {
      try {
        item.run();
      } catch (...) {
        error = std::current_exception();
      }
    }
    item.work->finish(error);
  }
}

}  // namespace nezha_torch
