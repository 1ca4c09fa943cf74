#include "transport/sharp/sharp_channel.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "transport/verbs/discovery.h"

namespace nezha {

namespace {

bool toSharp(DataType dt, sharp::sharp_datatype& out) {
  switch (dt) {
    case DataType::kFloat32:
      out = sharp::SHARP_DTYPE_FLOAT;
      return true;
    case DataType::kFloat64:
      out = sharp::SHARP_DTYPE_DOUBLE;
      return true;
    case DataType::kFloat16:
      out = sharp::SHARP_DTYPE_FLOAT_SHORT;
      return true;
    case DataType::kBFloat16:
      out = sharp::SHARP_DTYPE_BFLOAT16;
      return true;
    case DataType::kInt32:
      out = sharp::SHARP_DTYPE_INT;
      return true;
    case DataType::kInt64:
      out = sharp::SHARP_DTYPE_LONG;
      return true;
  }
  return false;
}

bool toSharp(ReduceOp op, sharp::sharp_reduce_op& out) {
  switch (op) {
    case ReduceOp::kSum:
      out = sharp::SHARP_OP_SUM;
      return true;
    case ReduceOp::kMin:
      out = sharp::SHARP_OP_MIN;
      return true;
    case ReduceOp::kMax:
      out = sharp::SHARP_OP_MAX;
      return true;
    case ReduceOp::kProd:
      return false;
  }
  return false;
}

// The same id on every rank and a different one per rail generation (the session carries
// "/rail<i>/gen<g>" on a rebuild), so a rebuilt rail never joins its dead predecessor's group.
uint64_t jobIdOf(const std::string& session, int rail) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : session) h = (h ^ c) * 1099511628211ull;
  return (h ^ static_cast<uint64_t>(rail)) * 1099511628211ull;
}

Options tcpOptions(const Options& o) {
  Options t = o;
  t.streamsPerPeer = 1;  // control, out-of-band and start-up check only: no bulk data
  return t;
}

}  // namespace

bool SharpChannel::supported(DataType dt, ReduceOp op) {
  sharp::sharp_datatype d;
  sharp::sharp_reduce_op r;
  return toSharp(dt, d) && toSharp(op, r);
}

std::string SharpChannel::deviceFor(const std::string& rail, const std::string& iface,
                                    const std::string& ipv4, const std::string& sysfsRoot,
                                    std::string* why) {
  try {
    const RdmaPort p = resolveRdmaPort(sysfsRoot, RdmaRailQuery{rail, iface, ipv4, ""});
    return strCat(p.device, ":", p.port);
  } catch (const ConfigError& e) {
    if (why != nullptr) *why = e.what();
    return iface;
  }
}

SharpChannel::SharpChannel(const Options& o, int railIndex, const std::string& address)
    : rail_(railIndex),
      railName_(o.rails.at(railIndex).name),
      iface_(o.rails.at(railIndex).iface),
      ioTimeout_(o.ioTimeout) {
  // The library first: a node without it refuses the rail before anything listens.
  lib_ = sharp::SharpLibrary::load(railName_, o.sharpLibrary);
  tcp_ = std::make_unique<TcpChannel>(tcpOptions(o), railIndex, address);
  device_ = deviceFor(railName_, iface_, address, "/sys", &discovery_);
}

SharpChannel::~SharpChannel() {
  releaseStaging(send_);
  releaseStaging(recv_);
  if (comm_ != nullptr) lib_->commDestroy(comm_);
  if (ctx_ != nullptr) lib_->finalize(ctx_);
}

void SharpChannel::connect(const JobTable& job, Deadline deadline) {
  tcp_->connect(job, deadline);
  const int me = tcp_->rank(), n = tcp_->size();
  sharp::sharp_coll_init_spec spec{};
  spec.job_id = jobIdOf(job.session, rail_);
  spec.world_rank = me;
  spec.world_size = n;
  spec.group_channel_idx = 0;
  spec.config.ib_dev_list = device_.c_str();
  spec.config.user_progress_num_polls = 0;
  // The runtime owns the timeout (progress timeout, abort): the library waits forever.
  spec.config.coll_timeout = -1;
  spec.oob_colls.barrier = &SharpChannel::oobBarrier;
  spec.oob_colls.bcast = &SharpChannel::oobBcast;
  spec.oob_colls.gather = &SharpChannel::oobGather;
  spec.world_local_rank = 0;
  spec.enable_thread_support = 1;  // rails are driven from their own threads
  spec.oob_ctx = this;
  int st = lib_->init(&spec, &ctx_);
  if (st != sharp::SHARP_COLL_SUCCESS || ctx_ == nullptr) {
    ctx_ = nullptr;
    fail(strCat(
        "sharp_coll_init on ", device_, ": ", lib_->errorText(st),
        oobError_.empty() ? "" : strCat("; out-of-band: ", oobError_),
        discovery_.empty() ? "" : strCat("; no HCA found behind ", iface_, ": ", discovery_)));
  }
  std::vector<uint32_t> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  sharp::sharp_coll_comm_init_spec cs{};
  cs.rank = me;
  cs.size = n;
  cs.oob_ctx = this;
  cs.group_world_ranks = ranks.data();
  st = lib_->commInit(ctx_, &cs, &comm_);
  if (st != sharp::SHARP_COLL_SUCCESS || comm_ == nullptr) {
    comm_ = nullptr;
    fail(strCat("sharp_coll_comm_init: ", lib_->errorText(st),
                oobError_.empty() ? "" : strCat("; out-of-band: ", oobError_)));
  }
}

// ---- out-of-band collectives (called by the library inside connect, on this rail's thread) --

void SharpChannel::bcast(void* buf, size_t len, int root) {
  std::vector<IoOp> ops;
  if (tcp_->rank() == root) {
    for (int p = 0; p < tcp_->size(); ++p) {
      if (p != root) ops.push_back(IoOp::send(p, buf, len));
    }
  } else {
    ops.push_back(IoOp::recv(root, buf, len));
  }
  tcp_->exchange(ops);
}

void SharpChannel::gather(int root, const void* sbuf, void* rbuf, size_t len) {
  std::vector<IoOp> ops;
  if (tcp_->rank() == root) {
    char* out = static_cast<char*>(rbuf);
    for (int p = 0; p < tcp_->size(); ++p) {
      if (p == root) {
        std::memmove(out + static_cast<size_t>(p) * len, sbuf, len);
      } else {
        ops.push_back(IoOp::recv(p, out + static_cast<size_t>(p) * len, len));
      }
    }
  } else {
    ops.push_back(IoOp::send(root, sbuf, len));
  }
  tcp_->exchange(ops);
}

int SharpChannel::oobBarrier(void* ctx) {
  auto* self = static_cast<SharpChannel*>(ctx);
  try {
    std::vector<char> in(1, 0), all(static_cast<size_t>(self->tcp_->size()));
    self->gather(0, in.data(), all.data(), 1);
    char go = 1;
    self->bcast(&go, 1, 0);
    return 0;
  } catch (const std::exception& e) {
    self->oobError_ = strCat("barrier: ", e.what());
    return -1;
  }
}

int SharpChannel::oobBcast(void* ctx, void* buf, int len, int root) {
  auto* self = static_cast<SharpChannel*>(ctx);
  try {
    if (len < 0 || root < 0 || root >= self->tcp_->size()) {
      throw Error(strCat("bad arguments (len ", len, ", root ", root, ")"));
    }
    self->bcast(buf, static_cast<size_t>(len), root);
    return 0;
  } catch (const std::exception& e) {
    self->oobError_ = strCat("bcast: ", e.what());
    return -1;
  }
}

int SharpChannel::oobGather(void* ctx, int root, void* sbuf, void* rbuf, int len) {
  auto* self = static_cast<SharpChannel*>(ctx);
  try {
    if (len < 0 || root < 0 || root >= self->tcp_->size()) {
      throw Error(strCat("bad arguments (len ", len, ", root ", root, ")"));
    }
    self->gather(root, sbuf, rbuf, static_cast<size_t>(len));
    return 0;
  } catch (const std::exception& e) {
    self->oobError_ = strCat("gather: ", e.what());
    return -1;
  }
}

// ---- the Channel side -----------------------------------------------------------------------

void SharpChannel::exchange(std::vector<IoOp>& ops) {
  if (broken_) throw RailError(rail_, strCat("rail ", railName_, ": SHARP rail already failed"));
  tcp_->exchange(ops);
}

void SharpChannel::abort() {
  aborted_ = true;
  tcp_->abort();
}

void SharpChannel::setProgressTimeout(std::chrono::milliseconds t) {
  progressTimeout_ = t;
  tcp_->setProgressTimeout(t);
}

void SharpChannel::setPeersStillComing(std::function<bool()> fn) {
  peersStillComing_ = fn;
  tcp_->setPeersStillComing(std::move(fn));
}

void SharpChannel::setProgressWatch(ProgressWatch fn) {
  progressWatch_ = fn;
  tcp_->setProgressWatch(std::move(fn));
}

void SharpChannel::fail(const std::string& what) {
  broken_ = true;
  tcp_->abort();  // peers waiting on this rank's out-of-band or control traffic learn at once
  throw RailError(rail_, strCat("rail ", railName_, " (sharp): ", what));
}

// ---- the offload ----------------------------------------------------------------------------

bool SharpChannel::supports(DataType dt, ReduceOp op) const { return supported(dt, op); }

void SharpChannel::ensureStaging(Staging& s, size_t bytes) {
  if (s.mr != nullptr && s.bytes.size() >= bytes) return;
  releaseStaging(s);
  s.bytes.assign(std::max<size_t>(bytes, 4096), 0);
  const int st = lib_->regMr(ctx_, s.bytes.data(), s.bytes.size(), &s.mr);
  if (st != sharp::SHARP_COLL_SUCCESS || s.mr == nullptr) {
    s.mr = nullptr;
    fail(strCat("sharp_coll_reg_mr of ", s.bytes.size(), " bytes: ", lib_->errorText(st)));
  }
}

void SharpChannel::releaseStaging(Staging& s) {
  if (s.mr != nullptr && ctx_ != nullptr) lib_->deregMr(ctx_, s.mr);
  s.mr = nullptr;
}

void SharpChannel::allreduce(const void* in, void* out, size_t count, DataType dt, ReduceOp op) {
  if (broken_ || aborted_) fail("aborted");
  NEZHA_ENFORCE(comm_ != nullptr, "SHARP allreduce before connect");
  sharp::sharp_datatype sdt;
  sharp::sharp_reduce_op sop;
  NEZHA_ENFORCE(toSharp(dt, sdt) && toSharp(op, sop), "SHARP cannot reduce ", toString(dt), " ",
                toString(op));
  const size_t bytes = count * dataTypeSize(dt);
  if (bytes == 0) return;
  ensureStaging(send_, bytes);
  ensureStaging(recv_, bytes);
  std::memcpy(send_.bytes.data(), in, bytes);
  sharp::sharp_coll_reduce_spec spec{};
  spec.root = 0;
  spec.sbuf_desc.type = sharp::SHARP_DATA_BUFFER;
  spec.sbuf_desc.mem_type = sharp::SHARP_MEM_TYPE_HOST;
  spec.sbuf_desc.buffer.ptr = send_.bytes.data();
  spec.sbuf_desc.buffer.length = bytes;
  spec.sbuf_desc.buffer.mem_handle = send_.mr;
  spec.rbuf_desc.type = sharp::SHARP_DATA_BUFFER;
  spec.rbuf_desc.mem_type = sharp::SHARP_MEM_TYPE_HOST;
  spec.rbuf_desc.buffer.ptr = recv_.bytes.data();
  spec.rbuf_desc.buffer.length = bytes;
  spec.rbuf_desc.buffer.mem_handle = recv_.mr;
  spec.dtype = sdt;
  spec.tag_dtype = sharp::SHARP_DTYPE_NULL;
  spec.length = count;
  spec.op = sop;
  spec.aggr_mode = sharp::SHARP_AGGREGATION_NONE;
  void* req = nullptr;
  int st = lib_->allreduceNb(comm_, &spec, &req);
  if (st != sharp::SHARP_COLL_SUCCESS || req == nullptr) {
    fail(strCat("sharp_coll_do_allreduce_nb: ", lib_->errorText(st)));
  }
  // Poll with back-off: yield-spin for the microsecond completions SHARP is for, then short
  // sleeps so a rail left waiting does not take a core from the rails moving data.
  const auto start = Clock::now();
  const auto timeout = progressTimeout_.count() > 0 ? progressTimeout_ : ioTimeout_;
  auto nextWatch = start + kProgressWatchTick;
  std::chrono::microseconds nap{0};
  while (lib_->reqTest(req) == 0) {
    const auto now = Clock::now();
    std::string why;
    if (aborted_) {
      why = "aborted";
    } else if (now >= nextWatch && progressWatch_) {
      why = progressWatch_(start);
      nextWatch = now + kProgressWatchTick;
    }
    if (why.empty() && now - start >= timeout) {
      // A peer that has not reached this operation is not a dead rail: wait on, up to the
      // I/O timeout.
      const bool late = peersStillComing_ && now - start < ioTimeout_ && peersStillComing_();
      if (!late) {
        why = strCat("no completion within ",
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(),
                     " ms");
      }
    }
    if (!why.empty()) {
      lib_->reqFree(req);
      fail(strCat("allreduce of ", bytes, " bytes: ", why));
    }
    if (nap.count() == 0) {
      std::this_thread::yield();
      if (now - start > std::chrono::microseconds(100)) nap = std::chrono::microseconds(20);
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(200));
    }
  }
  st = lib_->reqWait(req);  // complete: returns its status at once and frees it
  if (st != sharp::SHARP_COLL_SUCCESS) {
    fail(strCat("allreduce of ", bytes, " bytes: ", lib_->errorText(st)));
  }
  std::memcpy(out, recv_.bytes.data(), bytes);
}

}  // namespace nezha
