// Communicator: the public collectives that turn each call into per-rail slices, operation
// numbering and per-operation reports. Construction lives in communicator_setup.cc, the control
// endpoint's side in control_status.cc (state: communicator_impl.h); each operation runs through
// the failover engine (failover/failover_engine.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "base/socket.h"
#include "comm/communicator_impl.h"
#include "failover/op_header.h"
#include "schedule/probe.h"
#include "transport/transport.h"

namespace nezha {

using Impl = Communicator::Impl;

void Impl::fold(uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    signature = (signature ^ static_cast<uint32_t>((v >> (8 * i)) & 0xff)) * 16777619u;
  }
}

// Operation numbering and the tuning agreement that may precede an operation.
void Impl::beginOp(OpKind op, size_t count, DataType dt, int root) {
  const uint64_t n = opCounter;
  engine->beginOp(n);  // refuses when an earlier failure made the communicator unusable
  engine->setOpSignature(std::exchange(nextSignature, std::string()));
  ++opCounter;
  if (o.worldSize > 1 && sched->agreementDue(n)) {
    std::vector<double> stats = sched->pendingStats();
    if (!stats.empty()) {
      engine->confirmKept();  // a peer that failed the last round-free operation is in that round
      // At the start of an operation ranks may be far apart (one was computing or writing a
      // checkpoint): wait as long as for any I/O; a peer that is gone is caught by the mesh.
      auto agree = [this](std::vector<double>& v) { this->agree(v, o.ioTimeout); };
      // First a fixed-size round: same operations and same number of statistics everywhere
      // (max(x) == x and max(-x) == -x on every rank iff all ranks hold x).
      double sig = signature, len = static_cast<double>(stats.size());
      std::vector<double> check{sig, -sig, len, -len};
      agree(check);
      if (check[0] != sig || check[1] != -sig || check[2] != len || check[3] != -len) {
        throw ConfigError(
            strCat("ranks called different collectives or sizes between "
                   "operations ",
                   signatureSince, " and ", n - 1,
                   " (every rank must call the same collectives with the same "
                   "sizes in the same order)"));
      }
      agree(stats);
      sched->applyAgreed(stats);
      ++metrics.agreements;
      signature = 2166136261u;
      signatureSince = n;
    }
  }
  fold(static_cast<uint64_t>(op));
  fold(count);
  fold(static_cast<uint64_t>(dt));
  fold(static_cast<uint64_t>(root));
}

void Impl::report(OpKind op, const Plan& plan, const Outcome& outcome) {
  Plan ran = plan;
  ran.slices = outcome.done;
  report(op, ran, outcome.secs);
  last.replayed = outcome.replayed;
}

void Impl::report(OpKind op, const Plan& plan, const std::vector<double>& secs) {
  ++metrics.ops;
  if (plan.hot) ++metrics.hotOps;
  std::vector<bool> used(rails.size(), false);
  for (const Slice& s : plan.slices) {
    RailMetrics& m = metrics.rails[rails[s.rail].name];
    ++m.slices;
    m.bytes += s.count * plan.unitBytes;
    if (!used[s.rail] && !secs.empty()) m.seconds += secs[s.rail];
    used[s.rail] = true;
  }
  last = OpReport{};
  last.op = op;
  last.bytes = plan.units * plan.unitBytes;
  last.hot = plan.hot;
  for (const auto& r : rails) {
    last.split[r.name] = 0;
    last.railBytes[r.name] = 0;
    last.railSeconds[r.name] = 0;
  }
  for (const Slice& s : plan.slices) {
    const std::string& name = rails[s.rail].name;
    last.split[name] += plan.units ? static_cast<double>(s.count) / plan.units : 0;
    last.railBytes[name] += s.count * plan.unitBytes;
    last.railSeconds[name] = secs.empty() ? 0 : secs[s.rail];
  }
  if (control) publish();
}

int Communicator::rank() const { return impl_->o.rank; }
int Communicator::worldSize() const { return impl_->o.worldSize; }
const Options& Communicator::options() const { return impl_->o; }
std::vector<RailInfo> Communicator::rails() const { return impl_->rails; }
size_t Communicator::coldThreshold() const { return impl_->sched->coldThreshold(); }
void Communicator::abortRail(int rail) {
  if (rail < 0 || rail >= static_cast<int>(impl_->rails.size())) {
    throw InvalidArgument(strCat("abortRail: no rail ", rail));
  }
  impl_->engine->abortRail(rail);
}

int Communicator::controlPort() const { return impl_->control ? impl_->control->port() : 0; }

void Communicator::signNextOp(const void* bytes, size_t length) {
  if (length > kOpSignatureBytes || (length > 0 && bytes == nullptr)) {
    throw InvalidArgument(strCat("signNextOp: a signature of ", length, " bytes",
                                 bytes ? "" : " at a null pointer", " (at most ", kOpSignatureBytes,
                                 ")"));
  }
  std::string& sig = impl_->nextSignature;
  sig.assign(kOpSignatureBytes, '\0');
  if (length) std::memcpy(sig.data(), bytes, length);
}

std::vector<int> Communicator::peersNotStarted() const {
  return impl_->mesh ? impl_->mesh->peersNotStarted() : std::vector<int>{};
}

void Communicator::setColdThreshold(size_t bytes) { impl_->sched->setColdThreshold(bytes); }
const OpReport& Communicator::lastReport() const { return impl_->last; }
const Metrics& Communicator::metrics() const { return impl_->metrics; }
std::string Communicator::tableJson() const { return dumpJson(impl_->sched->table().toJson(), 2); }

void Communicator::saveTable(const std::string& path) const {
  std::ofstream out(path);
  out << tableJson() << "\n";
  if (!out) throw ConfigError(strCat("cannot write table to ", path));
}

static void checkBuffers(const char* op, const void* a, const void* b, size_t count) {
  if (count > 0 && (a == nullptr || b == nullptr)) {
    throw InvalidArgument(strCat(op, ": null buffer with count ", count));
  }
  if (count > (size_t(1) << 50)) throw InvalidArgument(strCat(op, ": count ", count, " too large"));
}

void Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             ReduceOp op) {
  Impl& m = *impl_;
  checkBuffers("allreduce", sendbuf, recvbuf, count);
  const size_t es = dataTypeSize(dtype);
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  m.beginOp(OpKind::kAllreduce, count, dtype, static_cast<int>(op));
  if (m.o.worldSize == 1) {
    if (in != out && count) std::memmove(out, in, count * es);
    m.report(OpKind::kAllreduce, Plan{OpKind::kAllreduce, false, {}, count, es, {}},
             std::vector<double>{});
    return;
  }
  // The offload rail (SHARP) takes the cold allreduces its library can reduce.
  auto makePlan = [&] {
    const int off = m.sched->offloadRail();
    CollectiveOffload* offload = off >= 0 ? m.engine->channel(off).offload() : nullptr;
    const bool offloadable = offload != nullptr && offload->supports(dtype, op);
    return m.sched->plan(OpKind::kAllreduce, count, es, offloadable);
  };
  Impl::MakeSliceFn make = [&m, es, dtype, op](const char* src, char* dst) -> Impl::SliceFn {
    return [&m, src, dst, es, dtype, op](Channel& ch, Scratch& s, const Slice& sl) {
      nezha::allreduce(ch, src + sl.offset * es, dst + sl.offset * es, sl.count, dtype, op, s,
                       m.algo);
    };
  };
  Plan plan;
  Impl::Outcome ran = m.engine->runOp(OpKind::kAllreduce, makePlan, in, count * es, out, count * es,
                                      m.o.failover && in == out, make, plan);
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kAllreduce, plan, ran);
}

void Communicator::broadcast(void* buf, size_t count, DataType dtype, int root) {
  Impl& m = *impl_;
  checkBuffers("broadcast", buf, buf, count);
  if (root < 0 || root >= m.o.worldSize) {
    throw InvalidArgument(strCat("broadcast: root ", root, " outside world size ", m.o.worldSize));
  }
  const size_t es = dataTypeSize(dtype);
  char* b = static_cast<char*>(buf);
  m.beginOp(OpKind::kBroadcast, count, dtype, root);
  if (m.o.worldSize == 1) {
    m.report(OpKind::kBroadcast, Plan{OpKind::kBroadcast, false, {}, count, es, {}},
             std::vector<double>{});
    return;
  }
  Impl::MakeSliceFn make = [&m, es, root](const char*, char* dst) -> Impl::SliceFn {
    return [&m, dst, es, root](Channel& ch, Scratch&, const Slice& sl) {
      nezha::broadcast(ch, dst + sl.offset * es, sl.count * es, root, m.algo);
    };
  };
  Plan plan;
  Impl::Outcome ran = m.engine->runOp(
      OpKind::kBroadcast, [&] { return m.sched->plan(OpKind::kBroadcast, count, es); }, b, 0, b, 0,
      false, make, plan);
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kBroadcast, plan, ran);
}

void Communicator::allgather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  Impl& m = *impl_;
  checkBuffers("allgather", sendbuf, recvbuf, count);
  const size_t es = dataTypeSize(dtype);
  const size_t n = static_cast<size_t>(m.o.worldSize);
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  char* mine = out + static_cast<size_t>(m.o.rank) * count * es;
  m.beginOp(OpKind::kAllgather, count, dtype, 0);
  if (m.o.worldSize == 1) {
    if (in != mine && count) std::memmove(mine, in, count * es);
    m.report(OpKind::kAllgather, Plan{OpKind::kAllgather, false, {}, count, es * n, {}},
             std::vector<double>{});
    return;
  }
  const size_t rank = static_cast<size_t>(m.o.rank);
  Impl::MakeSliceFn make = [&m, es, count, rank](const char* src, char* dst) -> Impl::SliceFn {
    char* own = dst + rank * count * es;
    return [&m, src, dst, own, es, count](Channel& ch, Scratch&, const Slice& sl) {
      if (src != own) std::memcpy(own + sl.offset * es, src + sl.offset * es, sl.count * es);
      nezha::allgather(ch, dst + sl.offset * es, count * es, sl.count * es, m.algo);
    };
  };
  Plan plan;
  Impl::Outcome ran = m.engine->runOp(
      OpKind::kAllgather, [&] { return m.sched->plan(OpKind::kAllgather, count, es * n); }, in,
      count * es, out, n * count * es, false, make, plan);
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kAllgather, plan, ran);
}

void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                 DataType dtype, ReduceOp op) {
  Impl& m = *impl_;
  checkBuffers("reduce_scatter", sendbuf, recvbuf, recvcount);
  const size_t es = dataTypeSize(dtype);
  const size_t n = static_cast<size_t>(m.o.worldSize);
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  m.beginOp(OpKind::kReduceScatter, recvcount, dtype, static_cast<int>(op));
  if (m.o.worldSize == 1) {
    if (in != out && recvcount) std::memmove(out, in, recvcount * es);
    m.report(OpKind::kReduceScatter, Plan{OpKind::kReduceScatter, false, {}, recvcount, es, {}},
             std::vector<double>{});
    return;
  }
  // An output overlapping the input would overwrite data a replay still needs.
  const bool overlap =
      m.o.failover && recvcount > 0 && out < in + n * recvcount * es && in < out + recvcount * es;
  Impl::MakeSliceFn make = [&m, es, recvcount, dtype, op](const char* src,
                                                          char* dst) -> Impl::SliceFn {
    return [&m, src, dst, es, recvcount, dtype, op](Channel& ch, Scratch& s, const Slice& sl) {
      nezha::reduceScatter(ch, src + sl.offset * es, recvcount * es, dst + sl.offset * es, sl.count,
                           dtype, op, s, m.algo);
    };
  };
  Plan plan;
  Impl::Outcome ran = m.engine->runOp(
      OpKind::kReduceScatter,
      [&] { return m.sched->plan(OpKind::kReduceScatter, recvcount, es * n); }, in,
      n * recvcount * es, out, recvcount * es, overlap, make, plan);
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kReduceScatter, plan, ran);
}

void Communicator::barrier() {
  Impl& m = *impl_;
  m.beginOp(OpKind::kBarrier, 0, DataType::kInt32, 0);
  ++m.metrics.ops;
  if (m.o.worldSize == 1) return;
  m.engine->runUnit([](Channel& ch, Scratch&) { barrierDissemination(ch); });
}

}  // namespace nezha
