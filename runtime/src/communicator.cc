// Communicator: wires rendezvous, rail channels, rail threads, probe and scheduler together and
// turns each collective into per-rail slice tasks.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "algorithms/algorithms.h"
#include "config.h"
#include "error.h"
#include "probe.h"
#include "rail_worker.h"
#include "rendezvous.h"
#include "scheduler.h"
#include "socket.h"
#include "tcp_channel.h"

namespace nezha {

struct Communicator::Impl {
  Options o;
  AlgoOptions algo;
  std::vector<RailInfo> rails;
  std::vector<std::unique_ptr<Channel>> channels;    // empty when worldSize == 1
  std::vector<std::unique_ptr<RailWorker>> workers;  // one per channel
  std::vector<Scratch> scratch;                      // touched only by the rail's worker
  std::unique_ptr<Scheduler> sched;
  uint64_t opCounter = 0;
  OpReport last;
  Metrics metrics;

  // Fail-stop until replay exists: the first RailError breaks the connections of every rail,
  // so peers fail at once (EOF) instead of after their I/O timeout and no byte of the
  // half-finished operation can be read as part of a later one; the communicator then refuses
  // every further operation. The fault-tolerance work replaces this with replay on survivors.
  std::string failure;  // first RailError's message; empty while healthy
  int failureRail = -1;

  [[noreturn]] void failStop(const RailError& e) {
    if (failure.empty()) {
      failure = e.what();
      failureRail = e.rail();
    }
    for (auto& ch : channels) ch->abort();
    throw e;
  }

  void checkUsable() const {
    if (failure.empty()) return;
    throw RailError(failureRail, strCat("communicator is unusable after an earlier rail failure (",
                                        failure, "); build a new one"));
  }

  void runOn(int rail, const std::function<void(Channel&, Scratch&)>& fn) {
    TaskHandle h;
    workers[rail]->submit([&] { fn(*channels[rail], scratch[rail]); }, &h);
    try {
      h.wait();
    } catch (const RailError& e) {
      failStop(e);
    }
  }

  // Runs every slice on its rail concurrently; returns seconds per rail (0 if unused). If any
  // rail fails, waits for the others and rethrows the first failure (RailError names the rail).
  std::vector<double> runSlices(const Plan& plan,
                                const std::function<void(Channel&, Scratch&, const Slice&)>& fn) {
    std::vector<double> secs(rails.size(), 0.0);
    std::vector<TaskHandle> handles(plan.slices.size());
    for (size_t i = 0; i < plan.slices.size(); ++i) {
      const Slice& s = plan.slices[i];
      workers[s.rail]->submit([&, s] { fn(*channels[s.rail], scratch[s.rail], s); }, &handles[i]);
    }
    std::exception_ptr first;  // first non-rail failure (a bug check), wins if any
    std::string railErrors;    // every failed rail's message
    int failedRail = -2;       // rail of the first RailError
    for (size_t i = 0; i < plan.slices.size(); ++i) {
      try {
        handles[i].wait();
        secs[plan.slices[i].rail] = handles[i].seconds();
      } catch (const RailError& e) {
        railErrors += strCat(railErrors.empty() ? "" : "; also ", e.what());
        if (failedRail == -2) failedRail = e.rail();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    if (failedRail != -2) failStop(RailError(failedRail, railErrors));
    return secs;
  }

  // Running hash of the operations since the last agreement (kind, size, dtype, root), so an
  // agreement round can tell when ranks called different collectives or sizes. 32 bits: exact
  // in a double.
  uint32_t signature = 2166136261u;
  uint64_t signatureSince = 0;

  void fold(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      signature = (signature ^ static_cast<uint32_t>((v >> (8 * i)) & 0xff)) * 16777619u;
    }
  }

  // Operation numbering and the agreement round that may precede an operation.
  void beginOp(OpKind op, size_t count, DataType dt, int root) {
    checkUsable();
    uint64_t n = opCounter++;
    if (o.worldSize > 1 && sched->agreementDue(n)) {
      std::vector<double> stats = sched->pendingStats();
      if (!stats.empty()) {
        auto run = [this](int r, const auto& fn) { runOn(r, fn); };
        // First a fixed-size round: same operations and same number of statistics everywhere
        // (max(x) == x and max(-x) == -x on every rank iff all ranks hold x).
        double sig = signature, len = static_cast<double>(stats.size());
        std::vector<double> check{sig, -sig, len, -len};
        agreeMax(check, sched->coldRail(), algo, run);
        if (check[0] != sig || check[1] != -sig || check[2] != len || check[3] != -len) {
          throw ConfigError(
              strCat("ranks called different collectives or sizes between "
                     "operations ",
                     signatureSince, " and ", n - 1,
                     " (every rank must call the same collectives with the same "
                     "sizes in the same order)"));
        }
        agreeMax(stats, sched->coldRail(), algo, run);
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

  void report(OpKind op, const Plan& plan, const std::vector<double>& secs) {
    ++metrics.ops;
    if (plan.hot) ++metrics.hotOps;
    for (const Slice& s : plan.slices) {
      RailMetrics& m = metrics.rails[rails[s.rail].name];
      ++m.slices;
      m.bytes += s.count * plan.unitBytes;
      m.seconds += secs.empty() ? 0 : secs[s.rail];
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
      last.split[name] = plan.units ? static_cast<double>(s.count) / plan.units : 0;
      last.railBytes[name] = s.count * plan.unitBytes;
      last.railSeconds[name] = secs.empty() ? 0 : secs[s.rail];
    }
  }

  // Shares a data-length table file read by rank 0 with every rank (over the cold rail).
  Table loadTable(const std::vector<std::string>& names) {
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
      runOn(0, [&](Channel& ch, Scratch&) {
        broadcastBinomialTree(ch, reinterpret_cast<char*>(&len), sizeof(len), 0);
      });
      if (len == UINT64_MAX) {
        throw ConfigError(readError.empty() ? "rank 0 cannot read its NEZHA_TABLE file"
                                            : readError);
      }
      text.resize(len);
      runOn(0, [&](Channel& ch, Scratch&) { nezha::broadcast(ch, text.data(), len, 0, algo); });
    } else if (!readError.empty()) {
      throw ConfigError(readError);
    }
    return Table::fromJson(text, names, "NEZHA_TABLE=" + o.tablePath);
  }
};

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

  if (m.o.worldSize > 1) {
    std::vector<std::unique_ptr<TcpChannel>> tcp;
    RankInfo mine;
    mine.rank = m.o.rank;
    mine.worldSize = m.o.worldSize;
    mine.fingerprint = configFingerprint(m.o);
    for (size_t i = 0; i < m.rails.size(); ++i) {
      tcp.push_back(std::make_unique<TcpChannel>(m.o, static_cast<int>(i), m.rails[i].address));
      mine.rails.push_back(tcp.back()->endpoint());
    }
    std::shared_ptr<RendezvousServer> server = m.o.server;
    if (m.o.rank == 0 && !server) server = std::make_shared<RendezvousServer>(m.o);
    Options dial = m.o;
    if (m.o.rank == 0) dial.rendezvousPort = server->port();
    JobTable job = rendezvous(dial, mine);
    Deadline deadline = Clock::now() + m.o.rendezvousTimeout;
    for (auto& ch : tcp) ch->connect(job, deadline);
    for (auto& ch : tcp) m.channels.push_back(std::move(ch));
    for (size_t i = 0; i < m.channels.size(); ++i) {
      m.workers.push_back(std::make_unique<RailWorker>());
    }
    m.scratch.resize(m.channels.size());
  }

  RailRunner run = [&m](int r, const std::function<void(Channel&, Scratch&)>& fn) {
    m.runOn(r, fn);
  };
  ProbeResult probe = probeRails(m.o, m.algo, run);
  for (size_t i = 0; i < m.rails.size(); ++i) {
    m.rails[i].latencySeconds = probe.latency[i];
    m.rails[i].bandwidthBytesPerSecond = probe.bandwidth[i];
  }
  Table table = m.loadTable(names);
  m.sched = std::make_unique<Scheduler>(m.o, probe, std::move(table));
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
  if (!impl_->channels.empty()) impl_->channels[rail]->abort();
}

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
    m.report(OpKind::kAllreduce, Plan{OpKind::kAllreduce, false, {}, count, es, {}}, {});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kAllreduce, count, es);
  auto secs = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    char* b = out + sl.offset * es;
    if (in != out) std::memcpy(b, in + sl.offset * es, sl.count * es);
    nezha::allreduce(ch, b, sl.count, dtype, op, s, m.algo);
  });
  m.sched->record(plan, secs);
  m.report(OpKind::kAllreduce, plan, secs);
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
    m.report(OpKind::kBroadcast, Plan{OpKind::kBroadcast, false, {}, count, es, {}}, {});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kBroadcast, count, es);
  auto secs = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    nezha::broadcast(ch, b + sl.offset * es, sl.count * es, root, m.algo);
  });
  m.sched->record(plan, secs);
  m.report(OpKind::kBroadcast, plan, secs);
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
    m.report(OpKind::kAllgather, Plan{OpKind::kAllgather, false, {}, count, es * n, {}}, {});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kAllgather, count, es * n);
  auto secs = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    if (in != mine) std::memcpy(mine + sl.offset * es, in + sl.offset * es, sl.count * es);
    allgatherRing(ch, out + sl.offset * es, count * es, sl.count * es);
  });
  m.sched->record(plan, secs);
  m.report(OpKind::kAllgather, plan, secs);
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
             {});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kReduceScatter, recvcount, es * n);
  auto secs = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    reduceScatterRing(ch, in + sl.offset * es, recvcount * es, out + sl.offset * es, sl.count,
                      dtype, op, s);
  });
  m.sched->record(plan, secs);
  m.report(OpKind::kReduceScatter, plan, secs);
}

void Communicator::barrier() {
  Impl& m = *impl_;
  m.beginOp(OpKind::kBarrier, 0, DataType::kInt32, 0);
  ++m.metrics.ops;
  if (m.o.worldSize == 1) return;
  m.runOn(m.sched->coldRail(), [](Channel& ch, Scratch&) { barrierDissemination(ch); });
}

}  // namespace nezha
