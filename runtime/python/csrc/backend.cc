#include "backend.h"

#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "monitored_barrier.h"

namespace nezha_torch {

namespace {

using nezha::DataType;
using nezha::ReduceOp;
using TensorList = std::vector<at::Tensor>;

void checkCpu(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "nezha backend: ", op, " got a tensor on ", t.device(),
              "; this backend moves CPU tensors only. For GPU training use NCCL with Nezha's "
              "NCCL net plugin (docs/nccl.md), which puts NCCL's traffic on the same rails.");
}

std::optional<DataType> native(at::ScalarType s) {
  switch (s) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    default:
      return std::nullopt;
  }
}

// Small integer types travel (and reduce) as int32: narrowing back gives the same wrapped
// result as reducing in the small type.
bool widened(at::ScalarType s) {
  return s == at::kChar || s == at::kByte || s == at::kShort || s == at::kBool;
}

void checkType(const at::Tensor& t, const char* op, bool reducing) {
  checkCpu(t, op);
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK(native(s) || widened(s), "nezha backend: ", op, " does not support dtype ", s,
              " (float32/64, float16, bfloat16, int8/16/32/64, uint8, bool)");
  TORCH_CHECK(!(reducing && s == at::kBool), "nezha backend: ", op,
              " cannot reduce bool tensors (use uint8 and MAX/MIN)");
}

// The contiguous native-typed tensor libnezha reads/writes for `t` (t itself when possible).
at::Tensor wire(const at::Tensor& t) {
  if (widened(t.scalar_type())) return t.to(at::kInt).contiguous();
  return t.contiguous();
}

// Copies a wire result back into the user's tensor unless they are the same memory.
void land(const at::Tensor& user, const at::Tensor& w) {
  if (!user.is_same(w)) user.copy_(w.view(user.sizes()));
}

DataType wireType(const at::Tensor& w) { return *native(w.scalar_type()); }

struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  bool average = false;
  std::optional<double> premul;
};

Reduction reduction(const c10d::ReduceOp& r, const at::Tensor& t, const char* what) {
  Reduction out;
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return out;
    case c10d::ReduceOp::PRODUCT:
      out.op = ReduceOp::kProd;
      return out;
    case c10d::ReduceOp::MIN:
      out.op = ReduceOp::kMin;
      return out;
    case c10d::ReduceOp::MAX:
      out.op = ReduceOp::kMax;
      return out;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "nezha backend: ", what,
                  " AVG needs a floating-point tensor, got ", t.scalar_type());
      out.average = true;
      return out;
    case c10d::ReduceOp::PREMUL_SUM: {
      // As ProcessGroupNCCL (the backend PREMUL_SUM was made for; gloo refuses the op): the
      // factor is applied in the tensor's own floating type. On integers a fractional factor
      // has no faithful meaning, and scaling a float copy then reducing it as integers was a
      // silent wrong result, so integer tensors are refused at the call.
      TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), "nezha backend: ", what,
                       " PREMUL_SUM needs a floating-point tensor (float32/64, float16, bfloat16), "
                       "got dtype ",
                       t.scalar_type());
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(r.supplement_.get());
      TORCH_CHECK(s != nullptr, "nezha backend: ", what, " PREMUL_SUM without a factor");
      out.premul = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
      return out;
    }
    default:
      TORCH_CHECK(false, "nezha backend: ", what, " does not support reduce op ",
                  static_cast<int>(r.op_), " (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM)");
  }
}

// Input scaled for PREMUL_SUM (a copy; the caller's tensor is not touched), in w's own dtype:
// libnezha reads the copy as wireType(w), so a promoted copy would be reinterpreted bytes.
at::Tensor premultiplied(const at::Tensor& w, const Reduction& r) {
  if (!r.premul) return w;
  at::Tensor scaled = w.mul(*r.premul).to(w.scalar_type()).contiguous();
  TORCH_INTERNAL_ASSERT(scaled.scalar_type() == w.scalar_type());
  return scaled;
}

void averageInPlace(const at::Tensor& w, const Reduction& r, int size) {
  if (r.average) w.div_(size);
}

// For signatures (op_signature.h): the elements of a list of tensors, and its first tensor's
// dtype (none for an empty list).
uint64_t totalNumel(const TensorList& v) {
  uint64_t n = 0;
  for (const auto& t : v) n += static_cast<uint64_t>(t.numel());
  return n;
}

at::Tensor firstOrNone(const TensorList& v) { return v.empty() ? at::Tensor() : v[0]; }

const at::Tensor& single(const TensorList& v, const char* op) {
  TORCH_CHECK(v.size() == 1, "nezha backend: ", op, " takes one tensor per process, got ",
              v.size());
  return v[0];
}

void checkList(const TensorList& list, size_t n, const at::Tensor& like, const char* op) {
  TORCH_CHECK(list.size() == n, "nezha backend: ", op, " needs a list of ", n, " tensors, got ",
              list.size());
  for (size_t i = 0; i < n; ++i) {
    checkCpu(list[i], op);
    TORCH_CHECK(list[i].scalar_type() == like.scalar_type() && list[i].numel() == like.numel(),
                "nezha backend: ", op, " tensor ", i, " is ", list[i].scalar_type(), "[",
                list[i].numel(), "], want ", like.scalar_type(), "[", like.numel(), "]");
  }
}

}  // namespace

NezhaBackend::NezhaBackend(c10d::Store& store, int rank, int size, bool rendezvousThroughStore,
                           std::chrono::milliseconds timeout, bool checkSignatures)
    : c10d::Backend(rank, size), timeout_(timeout) {
  nezha::Options o = nezha::Options::fromEnv();
  o.rank = rank;
  o.worldSize = size;
  // The group's timeout bounds a hung collective, as on gloo: libnezha waits for a late peer
  // (one that answers but has not started the operation) up to its I/O timeout
  // (runtime/README.md, "Detection"), so the shorter of the two ends it. A longer group timeout
  // does not raise NEZHA_IO_TIMEOUT_MS, which also bounds how long a silent rail lives.
  o.ioTimeout = std::min(o.ioTimeout, timeout);
  if (rendezvousThroughStore && size > 1) rendezvousThrough(store, o);
  comm_ = std::make_shared<nezha::Communicator>(o);
  const std::vector<nezha::RailInfo> rails = comm_->rails();
  p2p_ = std::make_unique<PeerLinks>(store, rank, size, rails.empty() ? "" : rails[0].address,
                                     o.jobToken, o.rendezvousTimeout);
  order_ = std::make_unique<OrderChannel>(*p2p_, rank, size);
  signatures_ = std::make_unique<SignatureCheck>(comm_, rank, size, timeout, checkSignatures);
  sendQueue_ = std::make_unique<WorkQueue>();
  queue_ = std::make_unique<WorkQueue>(order_.get());
}

void NezhaBackend::rendezvousThrough(c10d::Store& store, nezha::Options& o) {
  // Only the endpoint crosses torch's (unauthenticated) store; joining still needs the job
  // token, which every rank has from its own environment.
  const std::string key = "nezha/rendezvous";
  std::string where;
  if (o.rank == 0) {
    TORCH_CHECK(!o.rails.empty(), "nezha backend: NEZHA_RAILS names no rail");
    o.rendezvousHost = nezha::interfaceAddress(o.rails[0].iface, o.rails[0].name);
    o.rendezvousPort = 0;  // the server picks a free port
    o.server = nezha::startRendezvousServer(o);
    o.rendezvousPort = nezha::rendezvousServerPort(*o.server);
    where = o.rendezvousHost + ":" + std::to_string(o.rendezvousPort);
    store.set(key, std::vector<uint8_t>(where.begin(), where.end()));
  } else {
    const std::vector<uint8_t> v = store.get(key);
    where.assign(v.begin(), v.end());
    const size_t colon = where.rfind(':');
    int port = 0;
    try {
      port = colon == std::string::npos ? 0 : std::stoi(where.substr(colon + 1));
    } catch (const std::exception&) {
      port = 0;
    }
    TORCH_CHECK(port > 0 && port < 65536, "nezha backend: bad rendezvous endpoint '", where,
                "' in torch's store (key ", key, ")");
    o.rendezvousHost = where.substr(0, colon);
    o.rendezvousPort = port;
  }
}

NezhaBackend::~NezhaBackend() {
  shutdown();
  comm_.reset();
}

void NezhaBackend::shutdown() {
  // Python may call this (or drop the last reference) while holding the GIL, and a worker or
  // p2p reader thread releasing a finished op's tensors takes the GIL (torch decrefs their
  // Python objects): joining those threads with the GIL held deadlocks. Join without it.
  std::optional<pybind11::gil_scoped_release> noGil;
  if (Py_IsInitialized() && PyGILState_Check()) noGil.emplace();
  queue_->stop();  // collectives first: each rank issued them in the same order
  sendQueue_->stop();
  p2p_->close();
  completions_->stop();  // last: the steps above complete Futures
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::enqueue(OpSignature sig, const char* title,
                                                     TensorList outputs, std::function<void()> run,
                                                     std::optional<int32_t> priority) {
  auto work = c10::make_intrusive<NezhaWork>(rank_, sig.collective, title, std::move(outputs),
                                             completions_);
  // Operations are numbered in issue order and their signatures travel in libnezha's
  // operation on the worker (op_signature.h); one lock keeps the queue in numbering order.
  std::lock_guard<std::mutex> lock(issueMu_);
  std::shared_ptr<SignatureCheck::Issued> issued = signatures_->issue(sig);
  work->boundWait(timeout_, [issued, comm = signatures_->communicator()] {
    return SignatureCheck::progress(*issued, comm);
  });
  queue_->push(
      work, [this, issued, run = std::move(run)] { signatures_->run(issued, run); }, priority);
  return work;
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::broadcast(TensorList& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  const at::Tensor t = single(tensors, "broadcast");
  checkType(t, "broadcast", false);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nezha backend: broadcast root ",
              opts.rootRank, " outside world size ", size_);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpSignature::of(c10d::OpType::BROADCAST, t, t.numel(), std::nullopt, root),
                 "nezha:broadcast", tensors, [this, t, root] {
                   at::Tensor w = wire(t);
                   comm_->broadcast(w.data_ptr(), w.numel(), wireType(w), root);
                   land(t, w);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allreduce(TensorList& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  const at::Tensor t = single(tensors, "allreduce");
  checkType(t, "allreduce", true);
  const Reduction r = reduction(opts.reduceOp, t, "allreduce");
  return enqueue(OpSignature::of(c10d::OpType::ALLREDUCE, t, t.numel(), opts.reduceOp),
                 "nezha:allreduce", tensors, [this, t, r] {
                   at::Tensor w = wire(t);
                   at::Tensor in = premultiplied(w, r);
                   comm_->allreduce(in.data_ptr(), w.data_ptr(), w.numel(), wireType(w), r.op);
                   averageInPlace(w, r, size_);
                   land(t, w);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allreduceWithPriority(const at::Tensor& tensor,
                                                                   int64_t priority) {
  TORCH_CHECK(priority >= 0 && priority <= std::numeric_limits<int32_t>::max(),
              "nezha backend: allreduce_with_priority priority ", priority,
              " is out of range (want 0..2147483647, higher runs first)");
  checkType(tensor, "allreduce_with_priority", true);
  const at::Tensor t = tensor;
  return enqueue(
      OpSignature::of(c10d::OpType::ALLREDUCE, t, t.numel(), c10d::ReduceOp(c10d::ReduceOp::SUM)),
      "nezha:allreduce_with_priority", {tensor},
      [this, t] {
        at::Tensor w = wire(t);
        comm_->allreduce(w.data_ptr(), w.data_ptr(), w.numel(), wireType(w), ReduceOp::kSum);
        land(t, w);
      },
      static_cast<int32_t>(priority));
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allreduce_coalesced(
    TensorList& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "nezha backend: allreduce_coalesced of no tensors");
  for (const auto& t : tensors) {
    checkType(t, "allreduce_coalesced", true);
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "nezha backend: allreduce_coalesced tensors must share one dtype");
  }
  const Reduction r = reduction(opts.reduceOp, tensors[0], "allreduce_coalesced");
  TensorList ts = tensors;
  // One flat operation: one split across rails and one failure agreement for all tensors.
  return enqueue(OpSignature::of(c10d::OpType::ALLREDUCE_COALESCED, tensors[0], totalNumel(tensors),
                                 opts.reduceOp),
                 "nezha:allreduce_coalesced", tensors, [this, ts, r] {
                   TensorList flat;
                   for (const auto& t : ts) flat.push_back(wire(t).reshape(-1));
                   at::Tensor w = at::cat(flat);
                   at::Tensor in = premultiplied(w, r);
                   comm_->allreduce(in.data_ptr(), w.data_ptr(), w.numel(), wireType(w), r.op);
                   averageInPlace(w, r, size_);
                   int64_t off = 0;
                   for (const auto& t : ts) {
                     t.copy_(w.narrow(0, off, t.numel()).view(t.sizes()));
                     off += t.numel();
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::reduce(TensorList& tensors,
                                                    const c10d::ReduceOptions& opts) {
  const at::Tensor t = single(tensors, "reduce");
  checkType(t, "reduce", true);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nezha backend: reduce root ",
              opts.rootRank, " outside world size ", size_);
  const Reduction r = reduction(opts.reduceOp, t, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpSignature::of(c10d::OpType::REDUCE, t, t.numel(), opts.reduceOp, root),
                 "nezha:reduce", tensors, [this, t, r, root] {
                   at::Tensor w = wire(t);
                   at::Tensor in = premultiplied(w, r);
                   comm_->reduce(in.data_ptr(), rank_ == root ? w.data_ptr() : nullptr, w.numel(),
                                 wireType(w), r.op, root);
                   if (rank_ == root) {
                     averageInPlace(w, r, size_);
                     land(t, w);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allgather(std::vector<TensorList>& outputs,
                                                       TensorList& inputs,
                                                       const c10d::AllgatherOptions&) {
  const at::Tensor in = single(inputs, "allgather");
  checkType(in, "allgather", false);
  TORCH_CHECK(outputs.size() == 1, "nezha backend: allgather takes one output list");
  checkList(outputs[0], size_, in, "allgather");
  TensorList outs = outputs[0];
  return enqueue(OpSignature::of(c10d::OpType::ALLGATHER, in, in.numel()), "nezha:allgather", outs,
                 [this, in, outs] {
                   at::Tensor w = wire(in);
                   at::Tensor all =
                       at::empty({static_cast<int64_t>(size_) * w.numel()}, w.options());
                   comm_->allgather(w.data_ptr(), all.data_ptr(), w.numel(), wireType(w));
                   for (int i = 0; i < size_; ++i) {
                     outs[i].copy_(all.narrow(0, i * w.numel(), w.numel()).view(outs[i].sizes()));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions&) {
  checkType(input, "allgather_into_tensor", false);
  checkCpu(output, "allgather_into_tensor");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
      "nezha backend: allgather_into_tensor output is ", output.scalar_type(), "[", output.numel(),
      "], want ", input.scalar_type(), "[", input.numel() * size_, "]");
  at::Tensor out = output, in = input;
  return enqueue(OpSignature::of(c10d::OpType::_ALLGATHER_BASE, in, in.numel()),
                 "nezha:allgather_into_tensor", {output}, [this, out, in] {
                   at::Tensor w = wire(in);
                   at::Tensor o = wire(out);
                   comm_->allgather(w.data_ptr(), o.data_ptr(), w.numel(), wireType(w));
                   land(out, o);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allgather_coalesced(
    std::vector<TensorList>& outputLists, TensorList& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputLists.size() == inputs.size(),
              "nezha backend: allgather_coalesced needs one output list per input");
  TensorList all;
  for (size_t k = 0; k < inputs.size(); ++k) {
    checkType(inputs[k], "allgather_coalesced", false);
    checkList(outputLists[k], size_, inputs[k], "allgather_coalesced");
    all.insert(all.end(), outputLists[k].begin(), outputLists[k].end());
  }
  auto lists = outputLists;
  TensorList ins = inputs;
  return enqueue(
      OpSignature::of(c10d::OpType::ALLGATHER_COALESCED, firstOrNone(ins), totalNumel(ins)),
      "nezha:allgather_coalesced", all, [this, lists, ins] {
        for (size_t k = 0; k < ins.size(); ++k) {
          at::Tensor w = wire(ins[k]);
          at::Tensor g = at::empty({size_ * w.numel()}, w.options());
          comm_->allgather(w.data_ptr(), g.data_ptr(), w.numel(), wireType(w));
          for (int i = 0; i < size_; ++i) {
            lists[k][i].copy_(g.narrow(0, i * w.numel(), w.numel()).view(lists[k][i].sizes()));
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::allgather_into_tensor_coalesced(
    TensorList& outputs, TensorList& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "nezha backend: allgather_into_tensor_coalesced needs one output per input");
  for (size_t k = 0; k < inputs.size(); ++k) {
    checkType(inputs[k], "allgather_into_tensor_coalesced", false);
    TORCH_CHECK(outputs[k].numel() == inputs[k].numel() * size_ &&
                    outputs[k].scalar_type() == inputs[k].scalar_type(),
                "nezha backend: allgather_into_tensor_coalesced output ", k, " has the wrong size");
  }
  TensorList outs = outputs, ins = inputs;
  return enqueue(OpSignature::of(c10d::OpType::COALESCED, firstOrNone(inputs), totalNumel(inputs)),
                 "nezha:allgather_into_tensor_coalesced", outputs, [this, outs, ins] {
                   for (size_t k = 0; k < ins.size(); ++k) {
                     at::Tensor w = wire(ins[k]);
                     at::Tensor o = wire(outs[k]);
                     comm_->allgather(w.data_ptr(), o.data_ptr(), w.numel(), wireType(w));
                     land(outs[k], o);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::gather(std::vector<TensorList>& outputs,
                                                    TensorList& inputs,
                                                    const c10d::GatherOptions& opts) {
  const at::Tensor in = single(inputs, "gather");
  checkType(in, "gather", false);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nezha backend: gather root ",
              opts.rootRank, " outside world size ", size_);
  const int root = static_cast<int>(opts.rootRank);
  TensorList outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "nezha backend: gather root takes one output list");
    checkList(outputs[0], size_, in, "gather");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "nezha backend: gather output list only on the root");
  }
  return enqueue(OpSignature::of(c10d::OpType::GATHER, in, in.numel(), std::nullopt, root),
                 "nezha:gather", outs, [this, in, outs, root] {
                   at::Tensor w = wire(in);
                   at::Tensor all;
                   if (rank_ == root) all = at::empty({size_ * w.numel()}, w.options());
                   comm_->gather(w.data_ptr(), rank_ == root ? all.data_ptr() : nullptr, w.numel(),
                                 wireType(w), root);
                   for (size_t i = 0; i < outs.size(); ++i) {
                     outs[i].copy_(all.narrow(0, i * w.numel(), w.numel()).view(outs[i].sizes()));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::scatter(TensorList& outputs,
                                                     std::vector<TensorList>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  const at::Tensor out = single(outputs, "scatter");
  checkType(out, "scatter", false);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nezha backend: scatter root ",
              opts.rootRank, " outside world size ", size_);
  const int root = static_cast<int>(opts.rootRank);
  TensorList ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "nezha backend: scatter root takes one input list");
    checkList(inputs[0], size_, out, "scatter");
    ins = inputs[0];
  }
  return enqueue(OpSignature::of(c10d::OpType::SCATTER, out, out.numel(), std::nullopt, root),
                 "nezha:scatter", outputs, [this, out, ins, root] {
                   at::Tensor w = wire(out);
                   at::Tensor all;
                   if (rank_ == root) {
                     TensorList flat;
                     for (const auto& t : ins) flat.push_back(wire(t).reshape(-1));
                     all = at::cat(flat);
                   }
                   comm_->scatter(rank_ == root ? all.data_ptr() : nullptr, w.data_ptr(), w.numel(),
                                  wireType(w), root);
                   land(out, w);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::reduce_scatter(
    TensorList& outputs, std::vector<TensorList>& inputs, const c10d::ReduceScatterOptions& opts) {
  const at::Tensor out = single(outputs, "reduce_scatter");
  checkType(out, "reduce_scatter", true);
  TORCH_CHECK(inputs.size() == 1, "nezha backend: reduce_scatter takes one input list");
  checkList(inputs[0], size_, out, "reduce_scatter");
  const Reduction r = reduction(opts.reduceOp, out, "reduce_scatter");
  TensorList ins = inputs[0];
  return enqueue(OpSignature::of(c10d::OpType::REDUCE_SCATTER, out, out.numel(), opts.reduceOp),
                 "nezha:reduce_scatter", outputs, [this, out, ins, r] {
                   TensorList flat;
                   for (const auto& t : ins) flat.push_back(wire(t).reshape(-1));
                   at::Tensor all = premultiplied(at::cat(flat), r);
                   at::Tensor w = wire(out);
                   comm_->reduceScatter(all.data_ptr(), w.data_ptr(), w.numel(), wireType(w), r.op);
                   averageInPlace(w, r, size_);
                   land(out, w);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkType(input, "reduce_scatter_tensor", true);
  checkCpu(output, "reduce_scatter_tensor");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * size_,
      "nezha backend: reduce_scatter_tensor input is ", input.scalar_type(), "[", input.numel(),
      "], want ", output.scalar_type(), "[", output.numel() * size_, "]");
  const Reduction r = reduction(opts.reduceOp, input, "reduce_scatter_tensor");
  at::Tensor out = output, in = input;
  return enqueue(
      OpSignature::of(c10d::OpType::_REDUCE_SCATTER_BASE, out, out.numel(), opts.reduceOp),
      "nezha:reduce_scatter_tensor", {output}, [this, out, in, r] {
        at::Tensor wi = premultiplied(wire(in), r);
        at::Tensor w = wire(out);
        comm_->reduceScatter(wi.data_ptr(), w.data_ptr(), w.numel(), wireType(w), r.op);
        averageInPlace(w, r, size_);
        land(out, w);
      });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::reduce_scatter_tensor_coalesced(
    TensorList& outputs, TensorList& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "nezha backend: reduce_scatter_tensor_coalesced needs one output per input");
  for (size_t k = 0; k < inputs.size(); ++k) {
    checkType(inputs[k], "reduce_scatter_tensor_coalesced", true);
    TORCH_CHECK(inputs[k].numel() == outputs[k].numel() * size_ &&
                    outputs[k].scalar_type() == inputs[k].scalar_type(),
                "nezha backend: reduce_scatter_tensor_coalesced input ", k, " has the wrong size");
  }
  const Reduction r = reduction(opts.reduceOp, inputs[0], "reduce_scatter_tensor_coalesced");
  TensorList outs = outputs, ins = inputs;
  return enqueue(
      OpSignature::of(c10d::OpType::COALESCED, inputs[0], totalNumel(outputs), opts.reduceOp),
      "nezha:reduce_scatter_tensor_coalesced", outputs, [this, outs, ins, r] {
        for (size_t k = 0; k < ins.size(); ++k) {
          at::Tensor wi = premultiplied(wire(ins[k]), r);
          at::Tensor w = wire(outs[k]);
          comm_->reduceScatter(wi.data_ptr(), w.data_ptr(), w.numel(), wireType(w), r.op);
          averageInPlace(w, r, size_);
          land(outs[k], w);
        }
      });
}

namespace {

// Element counts per peer of an alltoall_base buffer split along dim 0 (empty = even split).
std::vector<size_t> splitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int n,
                                const char* which) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> out(n);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "nezha backend: alltoall_base ", which, " has ", rows,
                " rows, not divisible by world size ", n, " (pass split sizes)");
    for (auto& c : out) c = static_cast<size_t>(rows / n * rowElems);
    return out;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == n, "nezha backend: alltoall_base ", which,
              " split sizes have ", splits.size(), " entries, want ", n);
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    TORCH_CHECK(splits[i] >= 0, "nezha backend: alltoall_base negative ", which, " split");
    sum += splits[i];
    out[i] = static_cast<size_t>(splits[i] * rowElems);
  }
  TORCH_CHECK(sum == rows, "nezha backend: alltoall_base ", which, " splits sum to ", sum,
              ", tensor has ", rows, " rows");
  return out;
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> NezhaBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& outputSplits,
                                                           std::vector<int64_t>& inputSplits,
                                                           const c10d::AllToAllOptions&) {
  checkType(input, "alltoall_base", false);
  checkCpu(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "nezha backend: alltoall_base output dtype ", output.scalar_type(),
              " differs from input ", input.scalar_type());
  const auto sc = splitCounts(input, inputSplits, size_, "input");
  const auto rc = splitCounts(output, outputSplits, size_, "output");
  at::Tensor out = output, in = input;
  return enqueue(OpSignature::of(c10d::OpType::ALLTOALL_BASE, in, OpSignature::kAnyCount),
                 "nezha:alltoall_base", {output}, [this, out, in, sc, rc] {
                   at::Tensor wi = wire(in), wo = wire(out);
                   const auto sd = displacements(sc), rd = displacements(rc);
                   comm_->alltoallv(wi.data_ptr(), sc.data(), sd.data(), wo.data_ptr(), rc.data(),
                                    rd.data(), wireType(wi));
                   land(out, wo);
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::alltoall(TensorList& outputs, TensorList& inputs,
                                                      const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "nezha backend: alltoall needs ", size_, " input and output tensors, got ",
              inputs.size(), " and ", outputs.size());
  for (int i = 0; i < size_; ++i) {
    checkType(inputs[i], "alltoall", false);
    checkCpu(outputs[i], "alltoall");
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                    outputs[i].scalar_type() == inputs[0].scalar_type(),
                "nezha backend: alltoall tensors must share one dtype");
  }
  TensorList outs = outputs, ins = inputs;
  return enqueue(OpSignature::of(c10d::OpType::ALLTOALL, ins[0], OpSignature::kAnyCount),
                 "nezha:alltoall", outputs, [this, outs, ins] {
                   std::vector<size_t> sc(size_), rc(size_);
                   TensorList flatIn;
                   for (int i = 0; i < size_; ++i) {
                     flatIn.push_back(wire(ins[i]).reshape(-1));
                     sc[i] = ins[i].numel();
                     rc[i] = outs[i].numel();
                   }
                   at::Tensor wi = at::cat(flatIn);
                   const size_t total = std::accumulate(rc.begin(), rc.end(), size_t(0));
                   at::Tensor wo = at::empty({static_cast<int64_t>(total)}, wi.options());
                   const auto sd = displacements(sc), rd = displacements(rc);
                   comm_->alltoallv(wi.data_ptr(), sc.data(), sd.data(), wo.data_ptr(), rc.data(),
                                    rd.data(), wireType(wi));
                   for (int i = 0; i < size_; ++i) {
                     outs[i].copy_(wo.narrow(0, rd[i], rc[i]).view(outs[i].sizes()));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpSignature::of(c10d::OpType::BARRIER, at::Tensor(), 0), "nezha:barrier", {},
                 [this] { comm_->barrier(); });
}

void NezhaBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Blocks for up to the timeout: without the GIL, so the p2p readers that deliver can run.
  std::optional<pybind11::gil_scoped_release> noGil;
  if (Py_IsInitialized() && PyGILState_Check()) noGil.emplace();
  nezha_torch::monitoredBarrier(*p2p_, rank_, size_, opts.timeout, waitAllRanks);
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::send(TensorList& tensors, int dstRank, int tag) {
  const at::Tensor t = single(tensors, "send");
  checkCpu(t, "send");
  TORCH_CHECK(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "nezha backend: send to rank ",
              dstRank, " (world size ", size_, ", this is rank ", rank_, ")");
  // Bytes as they are: any dtype travels, the receiver checks the size.
  const at::Tensor c = t.contiguous();
  auto work = c10::make_intrusive<NezhaWork>(rank_, c10d::OpType::SEND, "nezha:send", tensors,
                                             completions_);
  sendQueue_->push(work, [this, c, dstRank, tag] {
    p2p_->send(dstRank, tag, c.data_ptr(), c.numel() * c.element_size());
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::receive(TensorList& tensors, int srcRank, int tag) {
  const at::Tensor t = single(tensors, "recv");
  checkCpu(t, "recv");
  auto work = c10::make_intrusive<NezhaWork>(
      rank_, srcRank < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, "nezha:recv", tensors,
      completions_);
  const size_t want = t.numel() * t.element_size();
  p2p_->post(srcRank, tag,
             [work, t, want, tag](int src, const std::vector<char>* msg, std::exception_ptr err) {
               if (!err) {
                 try {
                   TORCH_CHECK(msg->size() == want, "nezha backend: recv from rank ", src,
                               " with tag ", tag, " got ", msg->size(), " bytes, the tensor holds ",
                               want);
                   at::Tensor c = t.is_contiguous() ? t : at::empty_like(t).contiguous();
                   if (want) std::memcpy(c.data_ptr(), msg->data(), want);
                   if (!c.is_same(t)) t.copy_(c);
                 } catch (...) {
                   err = std::current_exception();
                 }
               }
               work->setSource(src);
               work->finish(err);
             });
  return work;
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::recv(TensorList& tensors, int srcRank, int tag) {
  TORCH_CHECK(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "nezha backend: recv from rank ",
              srcRank, " (world size ", size_, ", this is rank ", rank_, ")");
  return receive(tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> NezhaBackend::recvAnysource(TensorList& tensors, int tag) {
  return receive(tensors, -1, tag);
}

}  // namespace nezha_torch
