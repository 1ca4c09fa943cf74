// Communicator: construction (rendezvous, rail channels, control mesh, link watcher, probe,
// scheduler), the public collectives that turn each call into per-rail slices, operation
// numbering and per-operation reports. Failover, re-admission and the control endpoint live in
// failover.cc, readmission.cc and control_status.cc (state: communicator_impl.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/communicator_impl.h"
#include "core/error.h"
#include "schedule/probe.h"
#include "transport/tcp/tcp_channel.h"
#include "util/socket.h"

namespace nezha {

using Impl = Communicator::Impl;

void Impl::fold(uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    signature = (signature ^ static_cast<uint32_t>((v >> (8 * i)) & 0xff)) * 16777619u;
  }
}

// Operation numbering and the tuning agreement that may precede an operation.
void Impl::beginOp(OpKind op, size_t count, DataType dt, int root) {
  checkUsable();
  opStart = std::chrono::steady_clock::now();
  uint64_t n = opCounter++;
  if (mesh) mesh->setCurrentOp(n);
  if (o.worldSize > 1 && sched->agreementDue(n)) {
    std::vector<double> stats = sched->pendingStats();
    if (!stats.empty()) {
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

Table Impl::loadTable(const std::vector<std::string>& names, int rail) {
  if (o.tablePath.empty()) return Table(names);
  std::string text;
  uint64_t len = 0;
  std::string readError;
  if (o.rank == 0) {
    std::ifstream in(o.tablePath);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    if (!in) {
      readError = strCat("NEZHA_TABLE=", o.tablePath, ": cannot read file");
      len = UINT64_MAX;
    } else {
      text = ss.str();
      len = text.size();
    }
  }
  if (o.worldSize > 1) {
    runOn(rail, [&](Channel& ch, Scratch&) {
      broadcastBinomialTree(ch, reinterpret_cast<char*>(&len), sizeof(len), 0);
    });
    if (len == UINT64_MAX) {
      throw ConfigError(readError.empty() ? "rank 0 cannot read its NEZHA_TABLE file" : readError);
    }
    text.resize(len);
    runOn(rail, [&](Channel& ch, Scratch&) { nezha::broadcast(ch, text.data(), len, 0, algo); });
  } else if (!readError.empty()) {
    throw ConfigError(readError);
  }
  return Table::fromJson(text, names, "NEZHA_TABLE=" + o.tablePath);
}

Communicator::Communicator(const Options& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = options;
  validateOptions(m.o);
  m.algo.ringThreshold = m.o.ringThreshold;
  m.algo.chainThreshold = m.o.chainThreshold;
  std::vector<std::string> names;
  for (const auto& spec : m.o.rails) {
    RailInfo info;
    info.name = spec.name;
    info.iface = spec.iface;
    info.transport = spec.transport;
    info.address = spec.address.empty() ? interfaceAddress(spec.iface, spec.name) : spec.address;
    m.rails.push_back(info);
    names.push_back(spec.name);
  }

  std::vector<bool> usable(m.rails.size(), true);  // rails that start in the split
  std::string downAtStart;                         // why the others do not
  if (m.o.worldSize > 1) {
    std::vector<std::unique_ptr<TcpChannel>> tcp;
    RankInfo mine;
    mine.rank = m.o.rank;
    mine.worldSize = m.o.worldSize;
    mine.fingerprint = configFingerprint(m.o);
    for (size_t i = 0; i < m.rails.size(); ++i) {
      tcp.push_back(std::make_unique<TcpChannel>(m.o, static_cast<int>(i), m.rails[i].address));
      mine.rails.push_back(tcp.back()->endpoint());
      mine.rails.back().linkUp = m.rails[i].iface.empty() || linkHasCarrier(m.rails[i].iface);
    }
    std::shared_ptr<RendezvousServer> server = m.o.server;
    if (m.o.rank == 0 && !server) server = std::make_shared<RendezvousServer>(m.o);
    Options dial = m.o;
    if (m.o.rank == 0) dial.rendezvousPort = server->port();
    JobTable job = rendezvous(dial, mine);
    m.job = job;
    // A rail without carrier on some rank at start stays out on every rank (the same decision
    // everywhere: all ranks hold the same table) and joins later through re-admission.
    for (size_t i = 0; i < m.rails.size(); ++i) {
      std::string ranks;
      for (const RankInfo& ri : job.ranks) {
        if (!ri.rails[i].linkUp) ranks += strCat(ranks.empty() ? "" : ",", ri.rank);
      }
      if (ranks.empty()) continue;
      usable[i] = false;
      downAtStart += strCat(downAtStart.empty() ? "" : "; ", m.rails[i].name, " (",
                            m.rails[i].iface, ") has no link on rank ", ranks);
    }
    if (!downAtStart.empty() &&
        (!m.o.failover || std::none_of(usable.begin(), usable.end(), [](bool u) { return u; }))) {
      throw RailError(-1, strCat("cannot start: ", downAtStart,
                                 m.o.failover ? "; no rail is up on every rank"
                                              : " (NEZHA_FAILOVER=stop needs every rail)"));
    }
    Deadline deadline = Clock::now() + m.o.rendezvousTimeout;
    for (size_t i = 0; i < tcp.size(); ++i) {
      if (usable[i]) tcp[i]->connect(job, deadline);
    }
    const size_t nr = m.rails.size();
    for (size_t i = 0; i < nr; ++i) {
      m.workers.push_back(std::make_unique<RailWorker>());
      m.linkDown.push_back(std::make_unique<std::atomic<bool>>(false));
      m.reportedDownBy.push_back(std::make_unique<std::atomic<int>>(0));
      m.linkUpAt.push_back(std::make_unique<std::atomic<int64_t>>(0));
      m.generation.push_back(std::make_unique<std::atomic<uint64_t>>(0));
      m.controlRequest.push_back(std::make_unique<std::atomic<int>>(0));
    }
    m.scratch.resize(nr);
    m.localDown.assign(nr, false);
    m.failedAt.assign(nr, std::chrono::steady_clock::time_point{});
    m.holdDown.assign(nr, m.o.readmitHoldDown);
    m.drained.assign(nr, false);
    // Silence long enough that a loaded machine still answers; short enough that "every rail
    // down" becomes an error well within 2 s of the rails failing.
    const auto silence = std::max(m.o.progressFloor, std::chrono::milliseconds(300));
    m.mesh = std::make_unique<ControlMesh>(
        m.o.rank, m.o.worldSize, nr, silence,
        [&m](int peer, int rail, uint64_t gen) { m.onPeerRailDown(peer, rail, gen); });
    for (size_t i = 0; i < nr; ++i) {
      if (usable[i]) {
        m.mesh->attach(static_cast<int>(i), tcp[i]->releaseControl());
      } else {
        m.localDown[i] = true;
      }
      m.channels.push_back(std::move(tcp[i]));
    }
    std::vector<std::string> ifaces;
    for (const auto& r : m.rails) ifaces.push_back(r.iface);
    try {
      m.watcher = std::make_unique<LinkWatcher>(
          ifaces, [&m](size_t i) { m.onLinkDown(i); }, [&m](size_t i) { m.onLinkUp(i); });
    } catch (const Error& e) {
      // Detection then rests on the per-slice progress deadline alone; say so once.
      std::fprintf(stderr, "nezha: rank %d: %s; rail failures are detected by deadline only\n",
                   m.o.rank, e.what());
    }
  }

  RailRunner run = [&m](int r, const std::function<void(Channel&, Scratch&)>& fn) {
    m.runOn(r, fn);
  };
  auto agreeMax = [&m](std::vector<double>& v) { m.agree(v, m.o.ioTimeout); };
  ProbeResult probe = probeRails(m.o, m.algo, usable, run, agreeMax);
  for (size_t i = 0; i < m.rails.size(); ++i) {
    m.rails[i].latencySeconds = probe.latency[i];
    m.rails[i].bandwidthBytesPerSecond = probe.bandwidth[i];
  }
  const int firstUsable =
      static_cast<int>(std::find(usable.begin(), usable.end(), true) - usable.begin());
  Table table = m.loadTable(names, firstUsable);
  m.sched = std::make_unique<Scheduler>(m.o, probe, std::move(table));
  if (!downAtStart.empty()) {
    m.sched->setAlive(usable);
    m.opStart = std::chrono::steady_clock::now();
    for (size_t i = 0; i < usable.size(); ++i) {
      if (usable[i]) continue;
      std::vector<int> ranks;
      for (const RankInfo& ri : m.job.ranks) {
        if (!ri.rails[i].linkUp) ranks.push_back(ri.rank);
      }
      m.recordFailover(static_cast<int>(i), strCat("at start: ", downAtStart), ranks);
    }
  }
  if (!m.o.controlAddr.empty()) {
    m.control = std::make_unique<ControlServer>(
        m.o.controlAddr, [&m](const std::string& method, const std::string& path) {
          return m.handleControl(method, path);
        });
    m.publish();
  }
  if (m.o.verbose && m.o.rank == 0) {
    std::fprintf(stderr, "nezha: %d ranks, policy %s, cold rail %s, cold threshold %zu bytes\n",
                 m.o.worldSize, toString(m.o.policy), m.rails[m.sched->coldRail()].name.c_str(),
                 m.sched->coldThreshold());
  }
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->o.rank; }
int Communicator::worldSize() const { return impl_->o.worldSize; }
const Options& Communicator::options() const { return impl_->o; }
std::vector<RailInfo> Communicator::rails() const { return impl_->rails; }
size_t Communicator::coldThreshold() const { return impl_->sched->coldThreshold(); }
void Communicator::abortRail(int rail) {
  if (rail < 0 || rail >= static_cast<int>(impl_->rails.size())) {
    throw InvalidArgument(strCat("abortRail: no rail ", rail));
  }
  if (impl_->channels.empty()) return;
  std::lock_guard<std::mutex> lock(impl_->channelMu);
  impl_->channels[rail]->abort();
}

int Communicator::controlPort() const { return impl_->control ? impl_->control->port() : 0; }

void Communicator::setColdThreshold(size_t bytes) { impl_->sched->setColdThreshold(bytes); }
const OpReport& Communicator::lastReport() const { return impl_->last; }
const Metrics& Communicator::metrics() const { return impl_->metrics; }
std::string Communicator::tableJson() const { return impl_->sched->table().toJson().dump(); }

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
  // In place, a failed slice's original data would be gone before its replay: keep a copy.
  std::vector<char> preserved;
  if (m.o.failover && in == out && count > 0) {
    preserved.assign(in, in + count * es);
    in = preserved.data();
  }
  Plan plan = m.sched->plan(OpKind::kAllreduce, count, es);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    nezha::allreduce(ch, in + sl.offset * es, out + sl.offset * es, sl.count, dtype, op, s, m.algo);
  });
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
  Plan plan = m.sched->plan(OpKind::kBroadcast, count, es);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    nezha::broadcast(ch, b + sl.offset * es, sl.count * es, root, m.algo);
  });
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
  Plan plan = m.sched->plan(OpKind::kAllgather, count, es * n);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    if (in != mine) std::memcpy(mine + sl.offset * es, in + sl.offset * es, sl.count * es);
    allgatherRing(ch, out + sl.offset * es, count * es, sl.count * es);
  });
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
  std::vector<char> preserved;
  if (m.o.failover && recvcount > 0 && out < in + n * recvcount * es && in < out + recvcount * es) {
    preserved.assign(in, in + n * recvcount * es);
    in = preserved.data();
  }
  Plan plan = m.sched->plan(OpKind::kReduceScatter, recvcount, es * n);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    reduceScatterRing(ch, in + sl.offset * es, recvcount * es, out + sl.offset * es, sl.count,
                      dtype, op, s);
  });
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kReduceScatter, plan, ran);
}

void Communicator::barrier() {
  Impl& m = *impl_;
  m.beginOp(OpKind::kBarrier, 0, DataType::kInt32, 0);
  ++m.metrics.ops;
  if (m.o.worldSize == 1) return;
  m.runUnit([](Channel& ch, Scratch&) { barrierDissemination(ch); });
}

}  // namespace nezha
