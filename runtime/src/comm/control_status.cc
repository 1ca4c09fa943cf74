// The control endpoint's side of the communicator: drain/restore requests handed to the failover
// engine (applied at an agreed operation, failover/drain.cc), and the /status and /metrics
// snapshots the HTTP thread serves (refreshed after every operation under statusMu, so the HTTP
// thread never touches live state).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "base/error.h"
#include "base/json.h"
#include "comm/communicator_impl.h"
#include "control/prometheus.h"
#include "control/rail_routes.h"
#include "transport/offload.h"

namespace nezha {

using Impl = Communicator::Impl;

// The start-up check as /status reports it (the operator's RailsVerified condition reads it).
namespace {
// A rail whose measured speed is below this fraction of its RailClass's expectedBandwidthMbps is
// reported degraded (TCP and protocol overheads stay well above it on a healthy path).
constexpr double kDegradedFraction = 0.5;

// The rail's measured speed in bit/s as the link sees it: the probe's allreduce rate turned
// into bus bandwidth (x 2(n-1)/n, the nccl-tests convention: what each link carries in a ring
// allreduce); 0 when it was not measured.
double measuredBitsPerSecond(const Impl& m, size_t r) {
  const int n = m.o.worldSize;
  const bool measured =
      (r < m.bandwidthMeasured.size() && m.bandwidthMeasured[r]) || m.engine->reprobed(r);
  if (n < 2 || !measured) return 0;
  return m.rails[r].bandwidthBytesPerSecond * 8 * 2.0 * (n - 1) / n;
}

bool degraded(const Impl& m, size_t r) {
  const double expected = static_cast<double>(m.o.rails[r].expectedMbps) * 1e6;
  const double measured = measuredBitsPerSecond(m, r);
  return expected > 0 && measured > 0 && measured < kDegradedFraction * expected;
}

Json preflightJson(const Impl& m) {
  const Options& o = m.o;
  const Impl::PreflightReport& preflight = m.preflight;
  // Bounded: a large job's document stays small; the count says how many there were.
  constexpr size_t kMaxListed = 32;
  Json pf = Json::object();
  pf["policy"] = toString(o.preflight);
  pf["result"] = m.preflightResult();
  pf["peers_checked"] = preflight.peersChecked;
  pf["seconds"] = preflight.seconds;
  pf["failure_count"] = preflight.failures.size();
  Json list = Json::array();
  for (size_t i = 0; i < preflight.failures.size() && i < kMaxListed; ++i) {
    const PreflightFailure& f = preflight.failures[i];
    Json j = Json::object();
    j["rank"] = f.rank;
    j["rail"] = m.rails[f.rail].name;
    j["peer"] = f.peer;
    j["reason"] = f.reason;
    list.push_back(j);
  }
  pf["failures"] = list;
  return pf;
}
}  // namespace

void Impl::publish() {
  Json st = Json::object();
  st["rank"] = o.rank;
  st["world_size"] = o.worldSize;
  st["ops"] = metrics.ops;
  // The TCP rails' congestion control: what NEZHA_TCP_CONGESTION asked and what the sockets run.
  Json cc = Json::object();
  cc["setting"] = congestion.setting;
  cc["algorithm"] = congestion.algorithm;
  st["tcp_congestion_control"] = cc;
  Json rs = Json::array();
  const std::vector<int> openPeers = mesh ? mesh->openPeers() : std::vector<int>{};
  for (size_t r = 0; r < rails.size(); ++r) {
    const std::string& name = rails[r].name;
    const RailMetrics& m = metrics.rails[name];
    const std::string state = engine->railState(r);
    Json j = Json::object();
    j["name"] = name;
    j["state"] = state;
    j["reason"] = m.slow ? "slow" : "";
    j["bytes"] = m.bytes;
    j["split"] = last.split.count(name) ? last.split.at(name) : 0.0;
    j["bandwidth_bytes_per_second"] = rails[r].bandwidthBytesPerSecond;
    // Against the RailClass's expectedBandwidthMbps: both numbers, and the verdict.
    j["expected_mbps"] = o.rails[r].expectedMbps;
    j["measured_mbps"] = std::round(measuredBitsPerSecond(*this, r) / 1e6);
    j["degraded"] = degraded(*this, r);
    // Ranks verified reachable on this rail: this one plus the peers whose control connection
    // on it is open (a cut rail's connections are dropped by TCP_USER_TIMEOUT); none while the
    // rail is failed.
    const bool failed = state == "failed" || state == "probing";
    j["ranks_reachable"] = failed ? 0 : 1 + (r < openPeers.size() ? openPeers[r] : 0);
    // An offload rail (SHARP): the datatypes its fabric's capabilities let it reduce; the
    // others stay on the byte rails (docs/sharp.md).
    if (CollectiveOffload* off =
            engine->hasChannels() ? engine->channel(static_cast<int>(r)).offload() : nullptr) {
      Json types = Json::array();
      for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                          DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
        if (off->supports(dt, ReduceOp::kSum)) types.push_back(toString(dt));
      }
      j["offload_types"] = types;
    }
    rs.push_back(j);
  }
  st["rails"] = rs;
  st["preflight"] = preflightJson(*this);
  st["failovers"] = metrics.failovers.size();
  st["readmissions"] = metrics.readmissions.size();
  st["replayed_slices"] = metrics.replayedSlices;
  const std::string text = metricsExposition();
  std::lock_guard<std::mutex> lock(statusMu);
  statusJson = dumpJson(st);
  metricsText = text;
}

// GET /metrics: nezha_runtime_* families, labelled with the job, rank and rail, units in names.
std::string Impl::metricsExposition() const {
  PrometheusText p({{"job", o.jobName}, {"rank", std::to_string(o.rank)}});
  p.family("nezha_runtime_operations_total", "counter", "Collectives run (barriers included).");
  p.sample({}, static_cast<double>(metrics.ops));
  p.family("nezha_runtime_replayed_slices_total", "counter",
           "Slices (chunks) redone on surviving rails after a rail failed.");
  p.sample({}, static_cast<double>(metrics.replayedSlices));
  auto byRailReason = [&](const char* name, const char* help,
                          const std::vector<FailoverEvent>& events) {
    std::map<std::pair<std::string, std::string>, double> counts;
    for (const auto& r : rails) counts[{r.name, ""}];  // every rail appears, at zero
    for (const auto& e : events) counts[{e.rail, e.reason}] += 1;
    p.family(name, "counter", help);
    for (const auto& [key, n] : counts) {
      if (!key.second.empty() || n > 0) p.sample({{"rail", key.first}, {"reason", key.second}}, n);
    }
  };
  byRailReason("nezha_runtime_failovers_total",
               "Rails that left the split, by reason (carrier, watchdog, slow, transport, error, "
               "peer, preflight).",
               metrics.failovers);
  byRailReason("nezha_runtime_readmissions_total",
               "Rails that re-entered the split after their end-to-end probe passed.",
               metrics.readmissions);
  byRailReason("nezha_runtime_readmission_rejections_total",
               "Re-admission attempts that did not pass, by reason (probe, slow).",
               metrics.rejectedReadmissions);
  byRailReason("nezha_runtime_drains_total",
               "Rails drained through the control endpoint (reason operator).", metrics.drains);
  p.family("nezha_runtime_failover_stall_seconds", "summary",
           "Time from the start of the operation in flight to the agreed failover.");
  double stall = 0;
  for (const auto& e : metrics.failovers) stall += e.stallSeconds;
  p.sample({}, stall, "_sum");
  p.sample({}, static_cast<double>(metrics.failovers.size()), "_count");
  p.family("nezha_runtime_rail_up", "gauge", "1 while the rail carries its share, else 0.");
  for (size_t r = 0; r < rails.size(); ++r) {
    p.sample({{"rail", rails[r].name}}, sched && sched->alive()[r] ? 1 : 0);
  }
  p.family("nezha_runtime_rail_state", "gauge",
           "1 for the rail's current state (healthy, failed, probing, drained).");
  for (size_t r = 0; r < rails.size(); ++r) {
    p.sample({{"rail", rails[r].name}, {"state", engine->railState(r)}}, 1);
  }
  p.family("nezha_runtime_rail_bytes_total", "counter", "Operation bytes the rail carried.");
  for (const auto& r : rails) p.sample({{"rail", r.name}}, metricsOf(r.name).bytes);
  p.family("nezha_runtime_rail_busy_seconds_total", "counter", "Time the rail's slices took.");
  for (const auto& r : rails) p.sample({{"rail", r.name}}, metricsOf(r.name).seconds);
  p.family("nezha_runtime_rail_split_ratio", "gauge",
           "The rail's share of the last operation (0..1).");
  for (const auto& r : rails) {
    p.sample({{"rail", r.name}}, last.split.count(r.name) ? last.split.at(r.name) : 0.0);
  }
  p.family("nezha_runtime_rail_bandwidth_bytes_per_second", "gauge",
           "The rail's bandwidth as last measured (init probe or re-admission probe).");
  for (const auto& r : rails) p.sample({{"rail", r.name}}, r.bandwidthBytesPerSecond);
  p.family("nezha_runtime_rail_expected_bandwidth_bytes_per_second", "gauge",
           "The rail's expected speed (RailClass expectedBandwidthMbps; 0 = not given).");
  for (const auto& r : o.rails)
    p.sample({{"rail", r.name}}, static_cast<double>(r.expectedMbps) * 1e6 / 8);
  p.family("nezha_runtime_rail_degraded", "gauge",
           "1 when the rail's measured bus bandwidth is below half its expected speed, else 0.");
  for (size_t r = 0; r < rails.size(); ++r)
    p.sample({{"rail", rails[r].name}}, degraded(*this, r) ? 1 : 0);
  p.family("nezha_runtime_rejected_connections_total", "counter",
           "Connections to this rank's listeners turned away (stray, idle, garbage, wrong "
           "token).");
  p.sample({{"listener", "control"}},
           control ? static_cast<double>(control->rejectedConnections()) : 0);
  p.sample({{"listener", "rail"}}, static_cast<double>(metrics.railRejectedConnections));
  return p.text();
}

const RailMetrics& Impl::metricsOf(const std::string& rail) const {
  static const RailMetrics none;
  auto it = metrics.rails.find(rail);
  return it == metrics.rails.end() ? none : it->second;
}

// The routes and their verdicts are control/rail_routes.cc's (shared with the NCCL plugin);
// what a drain or restore does here is the engine's: applied at an agreed operation.
HttpReply Impl::handleControl(const HttpRequest& req) {
  RailRoutes routes;
  routes.statusJson = [this] {
    std::lock_guard<std::mutex> lock(statusMu);
    return statusJson;
  };
  routes.metricsText = [this] {
    std::lock_guard<std::mutex> lock(statusMu);
    return metricsText;
  };
  routes.railIndex = [this](const std::string& name) {
    for (size_t r = 0; r < rails.size(); ++r) {
      if (rails[r].name == name) return static_cast<int>(r);
    }
    return -1;
  };
  routes.apply = [this](int rail, const std::string& name, bool drain) -> HttpReply {
    if (o.worldSize == 1) return {409, "text/plain", "single-rank job has no rails in use\n", ""};
    engine->request(rail,
                    drain ? FailoverEngine::Request::kDrain : FailoverEngine::Request::kRestore);
    return railActionAccepted(name, drain, "at the next operation, on every rank");
  };
  routes.jobToken = o.jobToken;
  routes.verifier = &controlVerifier;
  return routeControlRequest(req, routes);
}

}  // namespace nezha
