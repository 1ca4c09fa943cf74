// Every collective's signature, compared across ranks before it moves any data: the ranks must
// issue the same collectives with the same arguments in the same order, and when they do not,
// libnezha cannot tell. Different sizes break its data path after a deadline and look like a
// failed rail; equal byte counts with a different dtype, reduce op or collective (float32 vs
// int32, SUM vs MAX, all_reduce vs broadcast) complete with silently wrong values.
//
// Each rank sends its signature (collective, dtype, element count, reduce op, root, the group's
// sequence number of the operation) to every other rank on the backend's PeerLinks (reserved
// tag) as the operation starts, and compares theirs once it is done (or failed). Overlapped,
// not before: a check that must finish before any data moves costs one more small-message
// latency per operation (+70 % at 1 KiB). Why not libnezha's per-operation agreement: its
// round is a max-reduce after the data moved, and small operations skip it (round-free,
// runtime/src/failover). Cost: bench/README.md, "Signature cost".
//
// A disagreement fails the operation on every rank with the same message (each rank sees all
// signatures): "MismatchError", the collective, each field that differs and which ranks hold
// which value. The group is then out of step (a skipped operation shifts every later one), so
// every later operation fails saying the group must be recreated. A peer that does not send
// its signature within the group's timeout (init_process_group(timeout=)) fails it the same
// way, naming the rank and the operation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "p2p.h"

namespace nezha_torch {

struct OpSignature {
  static constexpr uint64_t kAnyCount = ~uint64_t(0);  // counts that legitimately differ
  static constexpr uint8_t kNoReduce = 0xff;
  static constexpr int32_t kNoRoot = -1;
  static constexpr int8_t kNoDtype = -1;

  c10d::OpType collective = c10d::OpType::UNKNOWN;
  int8_t dtype = kNoDtype;       // at::ScalarType of the caller's tensors
  uint8_t reduceOp = kNoReduce;  // c10d::ReduceOp::RedOpType
  int32_t root = kNoRoot;
  uint64_t count = kAnyCount;  // elements this rank passes (the collective's per-rank count)
  uint64_t seq = 0;            // set by SignatureCheck: the group's operation number

  static OpSignature of(c10d::OpType collective, const at::Tensor& like, uint64_t count,
                        std::optional<c10d::ReduceOp> reduce = std::nullopt,
                        int32_t root = kNoRoot);
  std::string describe() const;  // "allreduce Float[100] SUM"
};

class SignatureCheck {
 public:
  // `links` must outlive this object; `timeout`: how long to wait for a peer's signature.
  SignatureCheck(PeerLinks& links, int rank, int size, std::chrono::milliseconds timeout,
                 bool enabled);

  // One operation between issue() and run().
  struct Issued;

  // The caller's thread, in issue order (the backend holds its issue lock, so the queue gets
  // operations in the same order): numbers the operation, sends its signature to every other
  // rank and posts the receives for theirs, so they travel while earlier operations and this
  // one run. Throws at the call once the group must be recreated.
  std::shared_ptr<Issued> issue(OpSignature sig);

  // The worker thread: runs `collective`, then compares every rank's signature. Throws
  // c10::DistBackendError ("MismatchError ...") on a disagreement (also when the collective
  // itself failed: a mismatch explains the failure), or naming the ranks whose signature never
  // came; rethrows the collective's own error when every rank ran the same operation; throws
  // without running anything once the group must be recreated.
  void run(const std::shared_ptr<Issued>& issued, const std::function<void()>& collective);

  // For a collective that outlived its wait (work_queue.h): the operation and which ranks'
  // signatures have not come, i.e. which ranks have not issued it yet. Static: the Work that
  // asks may outlive this object.
  static std::string progress(const Issued& issued, int rank, int size, bool enabled);

  bool enabled() const { return enabled_; }
  // Operations issued so far: the group's sequence number (the same on every rank in step).
  uint64_t issuedCount() const { return next_.load(); }
  static constexpr int64_t kTag = int64_t(1) << 41;  // above torch's int tags, apart from op_order
  static constexpr std::chrono::milliseconds kGraceAfterFailure{2000};

 private:
  [[noreturn]] void fail(const std::string& why);
  void throwIfBroken();

  PeerLinks& links_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  const bool enabled_;
  std::atomic<uint64_t> next_{0};  // written under the backend's issue lock
  std::mutex mu_;
  std::string broken_;  // why the group is out of step; "" while it is not
};

}  // namespace nezha_torch
