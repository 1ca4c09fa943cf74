#include "transport/sharp/sharp_channel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/params.h"
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

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};

uint32_t bitOf(DataType dt) { return 1u << static_cast<unsigned>(dt); }

// The SHARPv3 datatypes (bfloat16, int8, uint8): only some fabrics aggregate them, so the
// library's callers offer them only when sharp_coll_caps_query lists them (the NCCL SHARP
// plugin's "v3 datatypes" check; UCC the same). The older types every SHARP generation reduces.
bool needsCapability(sharp::sharp_datatype d) {
  return d == sharp::SHARP_DTYPE_BFLOAT16 || d == sharp::SHARP_DTYPE_INT8 ||
         d == sharp::SHARP_DTYPE_UINT8;
}

// What the fabric reduces and what it leaves to the byte rails, said once per process and
// rail for each distinct answer (a rebuilt rail on the same fabric says nothing new).
void sayCapabilities(int rank, const std::string& rail, int pktVersion, uint32_t types) {
  std::string yes, no;
  for (DataType dt : kAllTypes) {
    std::string& list = (types & bitOf(dt)) != 0 ? yes : no;
    list += strCat(list.empty() ? "" : ", ", toString(dt));
  }
  const std::string text = strCat(
      "rail ", rail, " (sharp): the fabric (SHARP packet version ", pktVersion, ") reduces ",
      yes.empty() ? "none of libnezha's types" : yes,
      no.empty() ? "" : strCat("; ", no, " not in its capabilities: stays on the byte rails"));
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(text).second) std::fprintf(stderr, "nezha: rank %d: %s\n", rank, text.c_str());
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

uint32_t SharpChannel::offloadTypesFrom(uint64_t sharpDtypeMask) {
  uint32_t types = 0;
  for (DataType dt : kAllTypes) {
    sharp::sharp_datatype d;
    if (!toSharp(dt, d)) continue;
    if (needsCapability(d) && (sharpDtypeMask & (uint64_t{1} << d)) == 0) continue;
    types |= bitOf(dt);
  }
  return types;
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
      ioTimeout_(o.ioTimeout),
      localRank_(o.localRank) {
  // The library first: a node without it refuses the rail before anything listens.
  lib_ = sharp::SharpLibrary::load(railName_, o.sharpLibrary);
  tcp_ = std::make_unique<TcpChannel>(tcpOptions(o), railIndex, address);
  device_ =
      deviceFor(railName_, iface_, address, paramString("NEZHA_RDMA_SYSFS_ROOT"), &discovery_);
}

SharpChannel::~SharpChannel() {
  // A request given up on is freed only once complete (the library's contract). One still in
  // flight ends with its group: the group goes first, then the registrations it could have
  // written through, then the context (which reclaims the request); the staging bytes
  // themselves are members, freed after all of that.
  if (abandoned_ != nullptr && lib_->reqTest(abandoned_) != 0) {
    lib_->reqFree(abandoned_);
    abandoned_ = nullptr;
  }
  if (comm_ != nullptr) lib_->commDestroy(comm_);
  releaseStaging(send_);
  releaseStaging(recv_);
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
  // The library's defaults, changed only where libnezha must decide (every caller does this).
  spec.config = *lib_->defaultConfig;
  spec.config.ib_dev_list = device_.c_str();
  // The runtime owns the timeout (progress timeout, abort): the library waits forever, and a
  // request given up on stays alive until the context goes (see the destructor).
  spec.config.coll_timeout = -1;
  spec.oob_colls.barrier = &SharpChannel::oobBarrier;
  spec.oob_colls.bcast = &SharpChannel::oobBcast;
  spec.oob_colls.gather = &SharpChannel::oobGather;
  spec.world_local_rank = localRank_;  // this process's index on its node
  spec.enable_thread_support = 1;      // rails are driven from their own threads
  spec.oob_ctx = this;
  int st = lib_->init(&spec, &ctx_);
  if (st != sharp::SHARP_COLL_SUCCESS || ctx_ == nullptr) {
    ctx_ = nullptr;
    fail(strCat(
        "sharp_coll_init on ", device_, ": ", lib_->errorText(st),
        oobError_.empty() ? "" : strCat("; out-of-band: ", oobError_),
        discovery_.empty() ? "" : strCat("; no HCA found behind ", iface_, ": ", discovery_)));
  }
  queryCapabilities();
  sharp::sharp_coll_comm_init_spec cs{};
  cs.rank = me;
  cs.size = n;
  cs.oob_ctx = this;
  // NULL: the group is the whole job, group rank = world rank (as the NCCL and UCC callers
  // pass it); a list would have to outlive the group, which keeps the pointer.
  cs.group_world_ranks = nullptr;
  st = lib_->commInit(ctx_, &cs, &comm_);
  if (st != sharp::SHARP_COLL_SUCCESS || comm_ == nullptr) {
    comm_ = nullptr;
    fail(strCat("sharp_coll_comm_init: ", lib_->errorText(st),
                oobError_.empty() ? "" : strCat("; out-of-band: ", oobError_)));
  }
}

void SharpChannel::queryCapabilities() {
  sharp::sharp_coll_caps caps{};
  const int st = lib_->capsQuery(ctx_, &caps);
  if (st != sharp::SHARP_COLL_SUCCESS) fail(strCat("sharp_coll_caps_query: ", lib_->errorText(st)));
  // Every rank must send the same allreduces to SHARP: the types all ranks' fabric ports
  // reduce, agreed over the out-of-band gather and broadcast (rank 0 ANDs them).
  uint32_t agreed = offloadTypesFrom(caps.support_mask.dtypes);
  const int n = tcp_->size();
  std::vector<uint32_t> all(static_cast<size_t>(n), 0);
  gather(0, &agreed, all.data(), sizeof(agreed));
  if (tcp_->rank() == 0) {
    for (uint32_t t : all) agreed &= t;
  }
  bcast(&agreed, sizeof(agreed), 0);
  offloadTypes_ = agreed;
  sayCapabilities(tcp_->rank(), railName_, caps.sharp_pkt_version, agreed);
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

bool SharpChannel::supports(DataType dt, ReduceOp op) const {
  return supported(dt, op) && (offloadTypes_.load() & bitOf(dt)) != 0;
}

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
  NEZHA_ENFORCE(supports(dt, op) && toSharp(dt, sdt) && toSharp(op, sop), "SHARP cannot reduce ",
                toString(dt), " ", toString(op), " on rail ", railName_);
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
      // Not freed: unfinished, it may still complete into recv_ (see the destructor).
      abandoned_ = req;
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
