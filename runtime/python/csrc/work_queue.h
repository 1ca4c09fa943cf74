// The backend's one worker thread: operations run in the order they were issued (every rank
// issues collectives in the same order, so running them in that order keeps ranks matched),
// each completing its NezhaWork when done. The caller's thread only enqueues, so DDP's
// autograd hooks return at once and communication overlaps the rest of backward.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace nezha_torch {

// An operation's handle: completed by the worker, waited on by the caller. Errors (a rail
// failure no surviving rail could absorb, bad arguments found late) are kept and rethrown by
// wait(), and set on the Future, so neither path hangs.
class NezhaWork : public c10d::Work {
 public:
  NezhaWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs);

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

  // Worker side.
  void finish(std::exception_ptr error);

 private:
  const char* title_;  // a string literal
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<int> source_{-1};
};

class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();  // stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Throws once stop() has begun: nothing is queued that would never run.
  void push(c10::intrusive_ptr<NezhaWork> work, std::function<void()> run);

  // Runs what is queued, then joins the worker (idempotent, any thread but the worker's own).
  // Call it without the GIL: releasing a finished op's tensors on the worker takes it.
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<c10::intrusive_ptr<NezhaWork>, std::function<void()>>> queue_;
  bool stop_ = false;
  std::mutex joinMu_;  // concurrent stop() calls join once
  std::thread thread_;
};

}  // namespace nezha_torch
