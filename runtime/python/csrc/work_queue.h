// The backend's one worker thread: operations run in the order they were issued (every rank
// issues collectives in the same order, so running them in that order keeps ranks matched),
// each completing its NezhaWork when done. Operations pushed with a priority may overtake
// each other, in an order rank 0 decides for every rank (op_order.h). The caller's thread only
// enqueues, so DDP's autograd hooks return at once and communication overlaps the rest of backward.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "completions.h"
#include "op_order.h"

namespace nezha_torch {

// An operation's handle: completed by the worker, waited on by the caller. Errors (a rail
// failure no surviving rail could absorb, bad arguments found late) are kept and rethrown by
// wait(), and set on the Future, so neither path hangs. wait() returns as soon as the operation
// is done; the Future is completed (its callbacks run) on `completions` (completions.h).
class NezhaWork : public c10d::Work {
 public:
  NezhaWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
            std::shared_ptr<Completions> completions);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // recv from any source: the rank the message came from (valid once completed).
  int sourceRank() const override;
  void setSource(int rank) { source_.store(rank); }
  const char* title() const { return title_; }  // "nezha:allreduce", for messages

  // Collectives, before the Work is queued: wait() without a timeout waits at most `timeout`
  // (the group's, init_process_group(timeout=)), as on gloo, then throws a DistBackendError
  // with what `describe` says (the operation and which ranks have not issued it).
  void boundWait(std::chrono::milliseconds timeout, std::function<std::string()> describe);

  // Worker side.
  void finish(std::exception_ptr error);

 private:
  const char* title_;  // a string literal
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Completions> completions_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<int> source_{-1};
  std::chrono::milliseconds groupTimeout_ = kNoTimeout;  // kNoTimeout: wait() waits for ever
  std::function<std::string()> describe_;
};

class WorkQueue {
 public:
  // `order` (may be null: no priorities on this queue) must outlive the queue.
  explicit WorkQueue(OrderChannel* order = nullptr);
  ~WorkQueue();  // stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Throws once stop() has begun: nothing is queued that would never run. `priority` (>= 0,
  // higher first) lets the operation overtake queued prioritised operations issued before it
  // (never one without a priority); needs an OrderChannel.
  void push(c10::intrusive_ptr<NezhaWork> work, std::function<void()> run,
            std::optional<int32_t> priority = std::nullopt);

  // Runs what is queued, then joins the worker (idempotent, any thread but the worker's own).
  // Call it without the GIL: releasing a finished op's tensors on the worker takes it.
  void stop();

  // (issue number, priority or -1) of the last kOrderLog operations, in the order the worker
  // started them (0 = the first operation pushed): the same on every rank (tests compare them).
  std::vector<std::pair<uint64_t, int64_t>> recentOrder() const;
  static constexpr size_t kOrderLog = 4096;

 private:
  struct Item {
    uint64_t seq = 0;
    std::optional<int32_t> priority;
    c10::intrusive_ptr<NezhaWork> work;
    std::function<void()> run;
  };

  void loop();
  // With mu_ held and the queue's front prioritised: the operation to run next, removed from
  // the queue. `announce` is set on the leader (tell the others before running it); an
  // operation that cannot run comes back with `error` set.
  Item takePrioritised(std::unique_lock<std::mutex>& lock, bool& announce,
                       std::exception_ptr& error);

  OrderChannel* const order_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // issue order
  uint64_t nextSeq_ = 0;
  std::deque<std::pair<uint64_t, int64_t>> started_;  // recentOrder()
  bool stop_ = false;
  std::mutex joinMu_;  // concurrent stop() calls join once
  std::thread thread_;
};

}  // namespace nezha_torch
