// Communicator construction, in the order a job comes up:
//   1. describeRails      name, interface and IPv4 address of every rail;
//   2. joinJob            one transport per rail (listening now), rendezvous with the other
//                         ranks, and which rails start in the split (carrier on every rank);
//   3. connectRails       data + control connections of the usable rails, per-rail failover
//                         state, the control mesh and the netlink link watch;
//   4. startScheduler     the init probe, the data-length table and the scheduler (rails down
//                         at start recorded as failovers at op 0);
//   5. startControl       the HTTP control endpoint, if asked for.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/socket.h"
#include "comm/communicator_impl.h"
#include "control/control_address.h"
#include "schedule/probe.h"
#include "transport/transport.h"

namespace nezha {

using Impl = Communicator::Impl;

Communicator::Communicator(const Options& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = options;
  validateOptions(m.o);
  m.algoTable = m.o.algoTable.empty() ? AlgoTable(m.o.ringThreshold, m.o.chainThreshold)
                                      : AlgoTable::parse(m.o.algoTable, "algorithm table",
                                                         m.o.ringThreshold, m.o.chainThreshold);
  m.algo = m.algoTable.options();
  m.congestion = resolveCongestionControl(m.o.tcpCongestion, "NEZHA_TCP_CONGESTION");
  m.describeRails();
  m.engine = std::make_unique<FailoverEngine>(m.o, m.rails, m.metrics, [&m](int rail) {
    return makeTransport(m.o, rail, m.rails[rail].address);
  });
  Impl::StartState start;
  start.usable.assign(m.rails.size(), true);
  start.downReason.assign(m.rails.size(), std::string());
  start.downRanks.assign(m.rails.size(), std::vector<int>());
  if (m.o.worldSize > 1) {
    std::vector<std::unique_ptr<Transport>> transports = m.joinJob(start);
    m.connectRails(transports, start);
  }
  m.startScheduler(start);
  m.startControl();
  if (m.preflight.result == "waiting") waitForPreflightRails();
  if (m.o.verbose && m.o.rank == 0) {
    std::fprintf(stderr,
                 "nezha: %d ranks, policy %s, cold rail %s, cold threshold %zu bytes, TCP "
                 "congestion control %s\n",
                 m.o.worldSize, toString(m.o.policy), m.rails[m.sched->coldRail()].name.c_str(),
                 m.sched->coldThreshold(), m.congestion.describe().c_str());
  }
}

Communicator::~Communicator() = default;

void Impl::describeRails() {
  for (const auto& spec : o.rails) {
    RailInfo info;
    info.name = spec.name;
    info.iface = spec.iface;
    info.transport = spec.transport;
    info.address = spec.address.empty() ? interfaceAddress(spec.iface, spec.name) : spec.address;
    rails.push_back(info);
  }
}

std::vector<std::unique_ptr<Transport>> Impl::joinJob(StartState& start) {
  std::vector<std::unique_ptr<Transport>> transports;
  RankInfo mine;
  mine.rank = o.rank;
  mine.worldSize = o.worldSize;
  mine.fingerprint = configFingerprint(o);
  for (size_t i = 0; i < rails.size(); ++i) {
    transports.push_back(makeTransport(o, static_cast<int>(i), rails[i].address));
    mine.rails.push_back(transports.back()->endpoint());
    mine.rails.back().linkUp = rails[i].iface.empty() || linkHasCarrier(rails[i].iface);
  }
  std::shared_ptr<RendezvousServer> server = o.server;
  if (o.rank == 0 && !server) server = std::make_shared<RendezvousServer>(o);
  Options dial = o;
  if (o.rank == 0) dial.rendezvousPort = server->port();
  job = rendezvous(dial, mine);
  // A rail without carrier on some rank at start stays out on every rank (the same decision
  // everywhere: all ranks hold the same table) and joins later through re-admission.
  for (size_t i = 0; i < rails.size(); ++i) {
    std::string list;
    std::vector<int> ranks;
    for (const RankInfo& ri : job.ranks) {
      if (ri.rails[i].linkUp) continue;
      list += strCat(list.empty() ? "" : ",", ri.rank);
      ranks.push_back(ri.rank);
    }
    if (ranks.empty()) continue;
    start.leaveOut(i, "carrier", ranks,
                   strCat(rails[i].name, " (", rails[i].iface, ") has no link on rank ", list));
  }
  // A SHARP rail alone cannot carry a job (it only reduces): count the byte-moving rails.
  bool noneUsable = true;
  for (size_t i = 0; i < rails.size(); ++i) {
    if (start.usable[i] && rails[i].transport != "sharp") noneUsable = false;
  }
  if (!start.downAtStart.empty() && (!o.failover || noneUsable)) {
    throw RailError(-1, strCat("cannot start: ", start.downAtStart,
                               o.failover ? "; no rail is up on every rank"
                                          : " (NEZHA_FAILOVER=stop needs every rail)"));
  }
  return transports;
}

void Impl::StartState::leaveOut(size_t rail, const std::string& reason, std::vector<int> ranks,
                                const std::string& why) {
  usable[rail] = false;
  downReason[rail] = reason;
  downRanks[rail] = std::move(ranks);
  downAtStart += strCat(downAtStart.empty() ? "" : "; ", why);
}

void Impl::connectRails(std::vector<std::unique_ptr<Transport>>& transports, StartState& start) {
  const size_t nr = rails.size();
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::vector<PreflightFailure>> local = connectAndCheck(transports, start);
  for (size_t i = 0; i < nr; ++i) {
    metrics.railRejectedConnections += transports[i]->rejectedConnections();
  }
  // Silence long enough that a loaded machine still answers; short enough that "every rail
  // down" becomes an error well within 2 s of the rails failing.
  const auto silence = std::max(o.progressFloor, std::chrono::milliseconds(300));
  mesh = std::make_unique<ControlMesh>(
      o.rank, o.worldSize, nr, silence,
      [this](int peer, int rail, uint64_t gen) { engine->onPeerRailDown(peer, rail, gen); },
      o.failover ? o.peerSilence : std::chrono::milliseconds(0));
  engine->setAgreement(mesh.get());
  engine->setJob(job, algo);
  for (size_t i = 0; i < nr; ++i) {
    // A rail that could not connect here has no control connections to give; the agreement
    // below runs over the others.
    if (start.usable[i] && local[i].empty()) {
      mesh->attach(static_cast<int>(i), transports[i]->releaseControl());
    }
  }
  if (o.preflight != PreflightPolicy::kOff) decidePreflight(local, transports, start, began);
  std::vector<std::unique_ptr<Channel>> channels;
  for (size_t i = 0; i < nr; ++i) channels.push_back(std::move(transports[i]));
  engine->adoptChannels(std::move(channels), start.usable);
  std::vector<std::string> ifaces;
  for (const auto& r : rails) ifaces.push_back(r.iface);
  try {
    watcher = std::make_unique<LinkWatcher>(
        ifaces, [this](size_t i) { engine->onLinkDown(i); },
        [this](size_t i) { engine->onLinkUp(i); });
  } catch (const Error& e) {
    // Detection then rests on the per-slice progress deadline alone; say so once.
    std::fprintf(stderr, "nezha: rank %d: %s; rail failures are detected by deadline only\n",
                 o.rank, e.what());
  }
}

void Impl::startScheduler(const StartState& start) {
  RailRunner run = [this](int r, const std::function<void(Channel&, Scratch&)>& fn) {
    engine->runOn(r, fn);
  };
  auto agreeMax = [this](std::vector<double>& v) { agree(v, o.ioTimeout); };
  ProbeResult probe = probeRails(o, algo, start.usable, run, agreeMax);
  const bool probed = o.worldSize > 1 && o.probeBytes > 0;
  bandwidthMeasured.assign(rails.size(), false);
  for (size_t i = 0; i < rails.size(); ++i) bandwidthMeasured[i] = probed && start.usable[i];
  // No init probe (NEZHA_PROBE_BYTES=0): the RailClasses' expected speeds, when every rail has
  // one, seed the split instead of equal shares; online tuning takes over from there. With a
  // probe, the measurement wins (it sees the path, not the nameplate).
  const bool allExpected = std::all_of(o.rails.begin(), o.rails.end(),
                                       [](const RailSpec& r) { return r.expectedMbps > 0; });
  if (!probed && allExpected) {
    for (size_t i = 0; i < rails.size(); ++i) {
      probe.bandwidth[i] = static_cast<double>(o.rails[i].expectedMbps) * 1e6 / 8;
    }
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < rails.size(); ++i) {
    rails[i].latencySeconds = probe.latency[i];
    rails[i].bandwidthBytesPerSecond = probe.bandwidth[i];
    names.push_back(rails[i].name);
  }
  const int firstUsable = static_cast<int>(
      std::find(start.usable.begin(), start.usable.end(), true) - start.usable.begin());
  Table table = loadTable(names, firstUsable);
  sched = std::make_unique<Scheduler>(o, probe, std::move(table), algoTable);
  engine->setScheduler(sched.get());
  if (start.downAtStart.empty()) return;
  sched->setAlive(start.usable);
  for (size_t i = 0; i < start.usable.size(); ++i) {
    if (start.usable[i]) continue;
    engine->recordDownAtStart(static_cast<int>(i), strCat("at start: ", start.downAtStart),
                              start.downRanks[i], start.downReason[i]);
  }
}

void Impl::startControl() {
  if (o.controlAddr.empty()) return;
  std::vector<std::string> railAddresses;
  for (const auto& r : rails) railAddresses.push_back(r.address);
  std::string routes;
  if (std::ifstream in("/proc/net/route"); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    routes = ss.str();
  }
  const ControlAddress at =
      resolveControlAddress(o.controlAddr, o.localRank, railAddresses, routes);
  control = std::make_unique<ControlServer>(
      at.host, at.port, [this](const HttpRequest& req) { return handleControl(req); });
  publish();
}

// Rank 0 reads the table file and broadcasts it, so every rank starts from the same splits
// even when only rank 0 can see the file.
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
    engine->runOn(rail, [&](Channel& ch, Scratch&) {
      broadcastBinomialTree(ch, reinterpret_cast<char*>(&len), sizeof(len), 0);
    });
    if (len == UINT64_MAX) {
      throw ConfigError(readError.empty() ? "rank 0 cannot read its NEZHA_TABLE file" : readError);
    }
    text.resize(len);
    engine->runOn(rail,
                  [&](Channel& ch, Scratch&) { nezha::broadcast(ch, text.data(), len, 0, algo); });
  } else if (!readError.empty()) {
    throw ConfigError(readError);
  }
  return Table::fromJson(text, names, "NEZHA_TABLE=" + o.tablePath);
}

}  // namespace nezha
