#include "nccl/plugin_context.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/congestion_control.h"
#include "base/error.h"
#include "base/params.h"
#include "base/socket.h"
#include "comm/config.h"
#include "control/control_address.h"
#include "control/control_server.h"
#include "control/prometheus.h"
#include "control/rail_routes.h"
#include "failover/link_watch.h"
#include "nccl/engine_link.h"

namespace nezha::ncclnet {

namespace {

// The plugin's own striping, stall detection and redial are gone: each connection runs on the
// runtime's engine (docs/nccl.md "One engine"). A job that still sets their knobs would get
// silently different behaviour, so init fails and names what to set instead.
struct RetiredKnob {
  const char* name;
  const char* replacement;
};
constexpr RetiredKnob kRetiredKnobs[] = {
    {"NEZHA_NCCL_STALL_MS",
     "NEZHA_WATCHDOG_MS (a rail that moves nothing while another moves data) and "
     "NEZHA_PROGRESS_FLOOR_MS (a rail that moves nothing at all)"},
    {"NEZHA_NCCL_READMIT_MS", "NEZHA_READMIT_HOLDDOWN_MS (how long a failed rail stays out)"},
    {"NEZHA_NCCL_CHUNK",
     "the learned split per message size (NEZHA_MIN_SLICE_BYTES: the least a rail is given)"},
};

void refuseRetiredKnobs() {
  for (const RetiredKnob& k : kRetiredKnobs) {
    if (std::getenv(k.name) != nullptr) {
      throw ConfigError(strCat(k.name, " is retired: the plugin runs the runtime's engine; set ",
                               k.replacement, " instead (docs/nccl.md \"Knobs\")"));
    }
  }
}

// The plugin's default progress floor is the watchdog's window, never below this (the control
// mesh's silence window follows the floor, and a loaded host must still answer within it).
constexpr std::chrono::milliseconds kLeastPluginFloor{300};

Options engineOptions(const std::vector<PluginRail>& rails, const std::vector<RailSpec>& specs) {
  Options o;
  for (const PluginRail& r : rails) {
    for (const RailSpec& spec : specs) {
      if (spec.name != r.name) continue;
      o.rails.push_back(spec);
      o.rails.back().address = r.ip;
    }
  }
  readEngineKnobsFromEnv(o);
  // Every message's head is an operation on one rail (nccl/engine_link.h), which the watchdog
  // cannot judge: no other rail of its attempt moves. Its no-progress deadline is the floor, so
  // a black-holed head rail held the loop for the runtime's 1 s floor (plus the late peer's
  // grace, transport/progress_guard.h); at the watchdog's window a black hole costs what it
  // costs a split operation (docs/nccl.md "Benchmark"). Set, NEZHA_PROGRESS_FLOOR_MS wins.
  if (std::getenv("NEZHA_PROGRESS_FLOOR_MS") == nullptr && o.watchdog.count() > 0) {
    o.progressFloor = std::max(o.watchdog, kLeastPluginFloor);
  }
  o.rank = 0;  // each link sets its own rank of two (nccl/pending_link.h)
  o.worldSize = 2;
  validateOptions(o);
  return o;
}

}  // namespace

PluginConfig PluginConfig::fromEnv() {
  refuseRetiredKnobs();
  PluginConfig c;
  const std::vector<RailSpec> specs = parseRails(paramString("NEZHA_RAILS"));
  for (const auto& r : specs) {
    // A SHARP rail reduces in the switches (NCCL reaches that through CollNet, not through a
    // net plugin's point-to-point stripes); libnezha uses it, this plugin leaves it out.
    if (r.transport == "sharp") continue;
    PluginRail pr;
    pr.name = r.name;
    pr.iface = r.iface;
    pr.ip = interfaceAddress(r.iface, r.name);
    in_addr a{};
    inet_pton(AF_INET, pr.ip.c_str(), &a);
    pr.ipv4 = a.s_addr;
    pr.expectedMbps = r.expectedMbps;
    c.rails.push_back(pr);
  }
  if (c.rails.empty()) {
    throw ConfigError(
        "NEZHA_RAILS has no rail the NCCL plugin can stripe over (sharp rails are "
        "an allreduce offload, not point-to-point rails)");
  }
  if (c.rails.size() > kMaxRails) {
    throw ConfigError(strCat("NEZHA_RAILS lists ", c.rails.size(),
                             " rails; the NCCL plugin's connect handle holds at most ", kMaxRails));
  }
  c.verbose = paramInt("NEZHA_VERBOSE", 0, 1) == 1;
  c.controlAddr = paramString("NEZHA_NCCL_CONTROL_ADDR");
  c.localRank = static_cast<int>(paramInt("NEZHA_LOCAL_RANK", 0, 4096, "LOCAL_RANK"));
  // /status reports it so the operator finds every process of the pod (port base + k for each
  // local rank k; docs/nccl.md "Steering"): torchrun sets LOCAL_WORLD_SIZE.
  c.localWorldSize =
      static_cast<int>(paramInt("NEZHA_LOCAL_WORLD_SIZE", 1, 4096, "LOCAL_WORLD_SIZE"));
  c.jobName = paramString("NEZHA_JOB_NAME");
  c.tcpCongestion =
      resolveCongestionControl(paramString("NEZHA_TCP_CONGESTION"), "NEZHA_TCP_CONGESTION")
          .socketOption;
  c.connectTimeout =
      std::chrono::milliseconds(paramInt("NEZHA_NCCL_CONNECT_TIMEOUT_MS", 100, 3600000));
  // Refused at init rather than connecting unauthenticated: the handle's nonce crosses NCCL's
  // bootstrap in clear, so without the token anyone who saw it could take a rail.
  c.jobToken = jobTokenFromEnv();
  if (c.jobToken.empty()) {
    throw ConfigError(
        "NEZHA_JOB_TOKEN_FILE and NEZHA_JOB_TOKEN are both unset; the NCCL plugin's rail "
        "connections prove the job token (the operator mounts it; docs/security.md \"NCCL "
        "plugin\")");
  }
  checkTokenStrength(c.jobToken);
  c.engine = engineOptions(c.rails, specs);
  return c;
}

PluginContext::PluginContext(PluginConfig config, ncclDebugLogger_t logger)
    : config_(std::move(config)), logger_(logger) {}

PluginContext::~PluginContext() = default;

void PluginContext::startControl() {
  if (config_.controlAddr.empty()) return;
  std::vector<std::string> railAddresses;
  for (const auto& r : config_.rails) railAddresses.push_back(r.ip);
  std::string routes;
  if (std::ifstream in("/proc/net/route"); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    routes = ss.str();
  }
  ControlAddress at;
  try {
    at = resolveControlAddress(config_.controlAddr, config_.localRank, railAddresses, routes);
  } catch (const ConfigError& e) {
    // The resolver names NEZHA_CONTROL_ADDR; the plugin's variable is its own.
    throw ConfigError(strCat("NEZHA_NCCL_CONTROL_ADDR: ", e.what()));
  }
  RailRoutes steering;
  steering.statusJson = [this] { return statsJson(); };
  steering.metricsText = [this] { return metricsText(); };
  steering.railIndex = [this](const std::string& name) {
    for (size_t r = 0; r < config_.rails.size(); ++r) {
      if (config_.rails[r].name == name) return static_cast<int>(r);
    }
    return -1;
  };
  steering.apply = [this](int rail, const std::string& name, bool drain) -> HttpReply {
    if (!setDrained(static_cast<size_t>(rail), drain)) {
      return {409, "text/plain", strCat("draining ", name, " would leave no rail\n"), ""};
    }
    info(strCat("rail ", name, drain ? " drained" : " restored", " through the control endpoint"));
    return railActionAccepted(name, drain, "at once, in both directions of this process's comms");
  };
  steering.jobToken = config_.jobToken;
  steering.verifier = &verifier_;
  control_ = std::make_unique<ControlServer>(at.host, at.port, [steering](const HttpRequest& req) {
    return routeControlRequest(req, steering);
  });
  info(strCat("control endpoint on ", at.host, ":", control_->port()));
}

PluginContext::Totals PluginContext::totals() const {
  Totals t;
  t.sent.railBytes.assign(config_.rails.size(), 0);
  t.received.railBytes.assign(config_.rails.size(), 0);
  std::lock_guard<std::mutex> lock(mu_);
  t.sent.add(closedSent_);
  t.received.add(closedReceived_);
  for (const EngineLink* link : links_)
    (link->sending() ? t.sent : t.received).add(link->counters());
  return t;
}

// The runtime's metric names (comm/control_status.cc), so one dashboard reads both
// integrations; labelled with the job, this process's local rank and the rail.
std::string PluginContext::metricsText() const {
  const Totals t = totals();
  LinkCounters all = t.sent;
  all.add(t.received);
  PrometheusText p({{"job", config_.jobName}, {"local_rank", std::to_string(config_.localRank)}});
  auto byRailReason = [&](const char* name, const char* help,
                          const LinkCounters::ByRailReason& counts) {
    p.family(name, "counter", help);
    for (const auto& [key, n] : counts)
      p.sample({{"rail", key.first}, {"reason", key.second}}, double(n));
  };
  byRailReason("nezha_runtime_failovers_total",
               "Rails that left a connection's split, by reason (carrier, watchdog, slow, "
               "transport, error, peer).",
               all.failovers);
  byRailReason("nezha_runtime_readmissions_total",
               "Rails that re-entered a connection's split after their probe passed.",
               all.readmissions);
  byRailReason("nezha_runtime_readmission_rejections_total",
               "Re-admission attempts that did not pass, by reason (probe, slow).",
               all.readmissionRejections);
  byRailReason("nezha_runtime_drains_total",
               "Rails drained through the control endpoint (reason operator), per connection.",
               all.drains);
  p.family("nezha_runtime_rail_bytes_total", "counter",
           "Message bytes the rail carried (sent and received, every connection).");
  for (size_t i = 0; i < config_.rails.size(); ++i)
    p.sample({{"rail", config_.rails[i].name}}, double(all.railBytes[i]));
  p.family("nezha_nccl_rail_drained", "gauge",
           "1 while the operator has the rail drained through the control endpoint, else 0.");
  for (size_t i = 0; i < config_.rails.size(); ++i)
    p.sample({{"rail", config_.rails[i].name}}, drained(i) ? 1 : 0);
  return p.text();
}

void PluginContext::warn(const std::string& msg) const {
  if (logger_ != nullptr) {
    logger_(NCCL_LOG_WARN, NCCL_LOG_SUBSYS_NET, __FILE__, __LINE__, "NET/Nezha : %s", msg.c_str());
  } else {
    std::fprintf(stderr, "NET/Nezha : %s\n", msg.c_str());
  }
}

void PluginContext::info(const std::string& msg) const {
  if (logger_ != nullptr) {
    logger_(NCCL_LOG_INFO, NCCL_LOG_SUBSYS_NET | NCCL_LOG_SUBSYS_INIT, __FILE__, __LINE__,
            "NET/Nezha : %s", msg.c_str());
  } else if (config_.verbose) {
    std::fprintf(stderr, "NET/Nezha : %s\n", msg.c_str());
  }
}

int PluginContext::controlPort() const { return control_ ? control_->port() : 0; }

void PluginContext::startLinkWatch() {
  std::vector<std::string> ifaces;
  for (const PluginRail& r : config_.rails) ifaces.push_back(r.iface);
  try {
    watcher_ = std::make_unique<LinkWatcher>(
        ifaces, [this](size_t i) { onLink(i, false); }, [this](size_t i) { onLink(i, true); });
  } catch (const Error& e) {
    warn(strCat(e.what(), "; rail failures are detected by deadline only"));
  }
}

void PluginContext::onLink(size_t rail, bool up) {
  std::lock_guard<std::mutex> lock(mu_);
  if (linkDown_[rail] == !up) return;
  linkDown_[rail] = !up;
  for (EngineLink* link : links_) {
    if (up) {
      link->onLinkUp(static_cast<int>(rail));
    } else {
      link->onLinkDown(static_cast<int>(rail));
    }
  }
  info(strCat("link of ", config_.rails[rail].iface, " (rail ", config_.rails[rail].name, ") ",
              up ? "is back" : "went down", "; ", links_.size(), " connection(s) told"));
}

void PluginContext::onRailSilent(const EngineLink* finder, int rail) {
  std::lock_guard<std::mutex> lock(mu_);
  for (EngineLink* link : links_) {
    if (link != finder) link->suspectRail(rail);
  }
}

bool PluginContext::setDrained(size_t rail, bool drain) {
  std::lock_guard<std::mutex> lock(mu_);
  if (drain) {
    size_t others = 0;
    for (size_t r = 0; r < config_.rails.size(); ++r) others += r != rail && !drained(r);
    if (others == 0) return false;
  }
  drained_[rail] = drain;
  const auto what = drain ? FailoverEngine::Request::kDrain : FailoverEngine::Request::kRestore;
  for (EngineLink* link : links_) link->request(static_cast<int>(rail), what);
  return true;
}

void PluginContext::attach(EngineLink* link) {
  // Before the link is shared: its thread calls this when it finds a rail silent.
  link->setSilenceListener([this, link](int rail) { onRailSilent(link, rail); });
  std::lock_guard<std::mutex> lock(mu_);
  links_.push_back(link);
  for (size_t r = 0; r < config_.rails.size(); ++r) {
    if (drained(r)) link->request(static_cast<int>(r), FailoverEngine::Request::kDrain);
    if (linkDown_[r]) link->onLinkDown(static_cast<int>(r));
  }
}

void PluginContext::detach(EngineLink* link) {
  const LinkCounters last = link->counters();
  std::lock_guard<std::mutex> lock(mu_);
  (link->sending() ? closedSent_ : closedReceived_).add(last);
  links_.erase(std::remove(links_.begin(), links_.end(), link), links_.end());
}

void PluginContext::noteFailure(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  lastFailure_ = what;
}

std::string PluginContext::statsJson() const {
  const Totals t = totals();
  auto perRail = [](const LinkCounters::ByRailReason& counts, const std::string& rail) {
    uint64_t n = 0;
    for (const auto& [key, c] : counts) n += key.first == rail ? c : 0;
    return n;
  };
  std::string out = "{\"rails\":[";
  for (size_t i = 0; i < config_.rails.size(); ++i) {
    const std::string& name = config_.rails[i].name;
    const uint64_t failures = perRail(t.sent.failovers, name) + perRail(t.received.failovers, name);
    const uint64_t readmissions =
        perRail(t.sent.readmissions, name) + perRail(t.received.readmissions, name);
    out += strCat(i ? "," : "", "{\"name\":\"", name, "\",\"bytes_sent\":", t.sent.railBytes[i],
                  ",\"bytes_received\":", t.received.railBytes[i], ",\"failures\":", failures,
                  ",\"readmissions\":", readmissions,
                  ",\"drained\":", drained(i) ? "true" : "false", "}");
  }
  std::string last = t.received.lastFailure.empty() ? t.sent.lastFailure : t.received.lastFailure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lastFailure_.empty()) last = lastFailure_;
  }
  std::string escaped;
  for (char ch : last) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    escaped += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  }
  return out + strCat("],\"last_failure\":\"", escaped, "\",\"local_rank\":", config_.localRank,
                      ",\"local_world_size\":", config_.localWorldSize, "}");
}

}  // namespace nezha::ncclnet
