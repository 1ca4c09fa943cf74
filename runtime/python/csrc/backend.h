// c10d::Backend "nezha": torch.distributed collectives on CPU tensors over libnezha's rails.
// Every operation is checked on the caller's thread (device, dtype, shapes: a mistake raises at
// the call), then queued to the worker (work_queue.h) and returned as an asynchronous Work.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "nezha/nezha.hpp"
#include "op_order.h"
#include "op_signature.h"
#include "p2p.h"
#include "work_queue.h"

namespace nezha_torch {

class NezhaBackend : public c10d::Backend {
 public:
  // Builds the communicator from NEZHA_* (rank and world size as given) and the p2p links
  // (addresses through `store`); blocks until every rank joined (rendezvous, rails, probe) or
  // NEZHA_RENDEZVOUS_TIMEOUT_MS passed.
  // rendezvousThroughStore: the group's rank 0 serves the rendezvous on a port of its own
  // (its first rail's address) and publishes it in `store`, instead of NEZHA_RENDEZVOUS. Every
  // group after the first needs it: NEZHA_RENDEZVOUS names one fixed endpoint, which a second
  // group (or two subgroups at once, e.g. FSDP's hybrid sharding) cannot share.
  // timeout: the group's (init_process_group(timeout=)): how long wait() waits for a collective
  // and an operation for the other ranks to start it. checkSignatures: compare every
  // operation's signature across ranks (op_signature.h; off only to measure what it costs).
  NezhaBackend(c10d::Store& store, int rank, int size, bool rendezvousThroughStore,
               std::chrono::milliseconds timeout, bool checkSignatures);
  ~NezhaBackend() override;

  const std::string getBackendName() const override { return "nezha"; }

  // The group's operation numbering (torch's object collectives and TORCH_DISTRIBUTED_DEBUG ask
  // for it): the collectives issued so far, counted from 0 at construction on every rank, as
  // their signatures number them (op_signature.h). Nothing to set up.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return signatures_->issuedCount(); }

  // destroy_process_group (and interpreter exit, nezha/torch/__init__.py): runs the queued
  // operations, joins the worker and p2p threads and fails what can no longer complete; later
  // operations raise. Threads must be gone before Python finalizes: a thread that releases a
  // tensor then takes the GIL, and CPython ends such a thread with a forced unwind that aborts
  // the process ("terminate called without an active exception"). Idempotent, any thread.
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // torch.distributed.monitored_barrier: gloo's algorithm on the p2p links, on this thread
  // (monitored_barrier.h). opts.timeout: torch passes the call's (or the group's) timeout.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // allreduce (SUM) of one tensor that may overtake queued prioritised operations issued
  // before it: `priority` 0..2^31-1, higher first (op_order.h). DDP reaches it through the comm
  // hook nezha.torch.priority_hook. Every rank must issue it where the others do, with or
  // without a priority, like any collective.
  c10::intrusive_ptr<c10d::Work> allreduceWithPriority(const at::Tensor& tensor, int64_t priority);

  // (issue number, priority or -1) of the last collectives, in the order this rank's worker
  // started them.
  std::vector<std::pair<uint64_t, int64_t>> recentOrder() const { return queue_->recentOrder(); }

  nezha::Communicator& communicator() { return *comm_; }

 private:
  c10::intrusive_ptr<c10d::Work> enqueue(OpSignature sig, const char* title,
                                         std::vector<at::Tensor> outputs, std::function<void()> run,
                                         std::optional<int32_t> priority = std::nullopt);

  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int srcRank, int tag);
  static void rendezvousThrough(c10d::Store& store, nezha::Options& o);

  // The group's (init_process_group(timeout=)): bounds a collective's wait() (work_queue.h)
  // and libnezha's wait for a late peer (its I/O timeout).
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<nezha::Communicator> comm_;  // shared: a Work's progress() holds it weakly
  std::unique_ptr<PeerLinks> p2p_;
  std::unique_ptr<OrderChannel> order_;         // over p2p_; used by queue_
  std::unique_ptr<SignatureCheck> signatures_;  // over comm_; on queue_'s worker
  std::mutex issueMu_;                          // signatures_->issue + queue_->push, atomically
  // Where every Work's Future completes (completions.h); shared with the Works, which may
  // outlive the backend.
  std::shared_ptr<Completions> completions_ = std::make_shared<Completions>();
  // Declared last: destroyed first, so queued operations finish while the communicator and
  // the p2p links live. Sends have their own thread: a send waiting behind a collective
  // (or the reverse) must not block pipeline stages that order them differently.
  std::unique_ptr<WorkQueue> sendQueue_;
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace nezha_torch
