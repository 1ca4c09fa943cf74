// Every collective's signature, compared across ranks before it moves any data: the ranks must
// issue the same collectives with the same arguments in the same order, and when they do not,
// libnezha cannot tell. Different sizes break its data path after a deadline and look like a
// failed rail; equal byte counts with a different dtype, reduce op or collective (float32 vs
// int32, SUM vs MAX, all_reduce vs broadcast) complete with silently wrong values.
//
// The signature rides in libnezha's operation itself (Communicator::signNextOp): the engine
// sends it in the operation's first frames to every peer of each rail it uses, ahead of the
// data, and each rank compares before it accepts the result (runtime/src/failover/
// signed_channel.h). No message and no thread hand-off of its own, so small collectives keep
// their latency (bench/README.md, "Signature cost"). Every rank receives every peer's
// signature, so every rank sees the same disagreement, and this file only names it: which
// field differs and which ranks hold which value, from the signatures libnezha hands back
// with its MismatchError.
//
// A disagreement fails the operation on every rank with the same message: "MismatchError", the
// collective, each field that differs and which ranks hold which value. The group is then out
// of step (a skipped operation shifts every later one), so every later operation fails saying
// the group must be recreated. A peer that never starts the operation is named when the
// collective outlives the group's timeout (init_process_group(timeout=)): libnezha's control
// mesh knows which peers have not started it (Communicator::peersNotStarted).
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

#include "nezha/nezha.hpp"

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
  // `comm` runs the collectives (the backend's, alive while this object is); `timeout`: the
  // group's, for messages.
  SignatureCheck(std::shared_ptr<nezha::Communicator> comm, int rank, int size,
                 std::chrono::milliseconds timeout, bool enabled);

  // One operation between issue() and run().
  struct Issued;

  // The caller's thread, in issue order (the backend holds its issue lock): numbers the
  // operation (the group's sequence number). Throws at the call once the group must be
  // recreated.
  std::shared_ptr<Issued> issue(OpSignature sig);

  // The worker thread: signs libnezha's next operation with the signature and runs
  // `collective`. Throws c10::DistBackendError ("MismatchError ...") when libnezha found that
  // the ranks disagree, naming the fields and ranks; names the ranks that never started it when
  // the collective failed and some had not; else rethrows the collective's own error; throws
  // without running anything once the group must be recreated.
  void run(const std::shared_ptr<Issued>& issued, const std::function<void()>& collective);

  // For a collective that outlived its wait (work_queue.h): the operation and which ranks have
  // not started it (libnezha's view). Static: the Work that asks may outlive this object and
  // the communicator (held weakly).
  static std::string progress(const Issued& issued, const std::weak_ptr<nezha::Communicator>& comm);
  std::weak_ptr<nezha::Communicator> communicator() const { return weak_; }

  bool enabled() const { return enabled_; }
  // Operations issued so far: the group's sequence number (the same on every rank in step).
  uint64_t issuedCount() const { return next_.load(); }

 private:
  [[noreturn]] void fail(const std::string& why);
  [[noreturn]] void failMismatch(const Issued& issued, const nezha::MismatchError& e);
  void throwIfBroken();

  nezha::Communicator& comm_;                      // the backend's; outlives this object
  const std::weak_ptr<nezha::Communicator> weak_;  // the same, for progress()
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  const bool enabled_;
  std::atomic<uint64_t> next_{0};  // written under the backend's issue lock
  std::mutex mu_;
  std::string broken_;  // why the group is out of step; "" while it is not
};

}  // namespace nezha_torch
