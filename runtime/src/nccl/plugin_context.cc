#include "nccl/plugin_context.h"

#include <arpa/inet.h>

#include <cstdio>
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

namespace nezha::ncclnet {

PluginConfig PluginConfig::fromEnv() {
  PluginConfig c;
  for (const auto& r : parseRails(paramString("NEZHA_RAILS"))) {
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
  c.chunkBytes = static_cast<uint32_t>(paramBytes("NEZHA_NCCL_CHUNK", kMinChunk, kMaxChunk));
  c.stall = std::chrono::milliseconds(paramInt("NEZHA_NCCL_STALL_MS", 50, 600000));
  c.readmitInterval = std::chrono::milliseconds(paramInt("NEZHA_NCCL_READMIT_MS", 10, 600000));
  c.verbose = paramInt("NEZHA_VERBOSE", 0, 1) == 1;
  c.controlAddr = paramString("NEZHA_NCCL_CONTROL_ADDR");
  c.localRank = static_cast<int>(paramInt("NEZHA_LOCAL_RANK", 0, 4096, "LOCAL_RANK"));
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

std::string PluginContext::metricsText() const {
  PrometheusText p({{"job", config_.jobName}, {"local_rank", std::to_string(config_.localRank)}});
  struct Family {
    const char* name;
    const char* help;
    std::atomic<uint64_t> RailCounters::*field;
  };
  static const Family families[] = {
      {"nezha_nccl_rail_sent_bytes_total",
       "Bytes the NCCL plugin sent on the rail and the peer acknowledged.",
       &RailCounters::bytesSent},
      {"nezha_nccl_rail_received_bytes_total",
       "Bytes the NCCL plugin received on the rail into posted receives.",
       &RailCounters::bytesReceived},
      {"nezha_nccl_rail_failures_total",
       "Times the rail failed while carrying NCCL traffic (error, lost carrier, stall).",
       &RailCounters::failures},
      {"nezha_nccl_rail_readmissions_total",
       "Times a failed rail came back after its probe was acknowledged.",
       &RailCounters::readmissions},
      {"nezha_nccl_rail_replayed_chunks_total",
       "Chunks a failed rail held that went to the other rails.", &RailCounters::chunksReplayed},
  };
  for (const auto& f : families) {
    p.family(f.name, "counter", f.help);
    for (size_t i = 0; i < config_.rails.size(); ++i) {
      p.sample({{"rail", config_.rails[i].name}}, double((counters_[i].*f.field).load()));
    }
  }
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

bool PluginContext::setDrained(size_t rail, bool drain) {
  std::lock_guard<std::mutex> lock(mu_);
  if (drain) {
    size_t others = 0;
    for (size_t r = 0; r < config_.rails.size(); ++r) others += r != rail && !drained(r);
    if (others == 0) return false;
  }
  drained_[rail] = drain;
  return true;
}

void PluginContext::noteFailure(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  lastFailure_ = what;
}

std::string PluginContext::statsJson() const {
  std::string out = "{\"rails\":[";
  for (size_t i = 0; i < config_.rails.size(); ++i) {
    const auto& c = counters_[i];
    out += strCat(i ? "," : "", "{\"name\":\"", config_.rails[i].name,
                  "\",\"bytes_sent\":", c.bytesSent.load(),
                  ",\"bytes_received\":", c.bytesReceived.load(),
                  ",\"failures\":", c.failures.load(), ",\"readmissions\":", c.readmissions.load(),
                  ",\"chunks_replayed\":", c.chunksReplayed.load(),
                  ",\"drained\":", drained(i) ? "true" : "false", "}");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string escaped;
  for (char ch : lastFailure_) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    escaped += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  }
  return out + "],\"last_failure\":\"" + escaped + "\"}";
}

}  // namespace nezha::ncclnet
