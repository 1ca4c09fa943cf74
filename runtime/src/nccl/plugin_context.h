// What every comm of the plugin shares: the rails from NEZHA_RAILS (the same env contract as
// libnezha, so the operator injects one topology for both integrations), the knobs, NCCL's
// logger, the live connections the operator's drains reach, and what /status and /metrics
// report of them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/request_auth.h"
#include "nccl/engine_link.h"
#include "nccl/handle.h"
#include "nccl/net_abi.h"
#include "nezha/nezha.hpp"

namespace nezha {
class ControlServer;
class LinkWatcher;
}  // namespace nezha

namespace nezha::ncclnet {

struct PluginRail {
  std::string name;
  std::string iface;
  std::string ip;     // the interface's IPv4 address; listeners and connects bind to it
  uint32_t ipv4 = 0;  // same, network byte order
  uint64_t expectedMbps = 0;
};

struct PluginConfig {
  std::vector<PluginRail> rails;
  // What every connection's engine runs with (nccl/engine_link.h): the rails above as RailSpecs
  // and the runtime's own knobs (NEZHA_WATCHDOG_MS, NEZHA_READMIT_HOLDDOWN_MS, ...), read as the
  // runtime reads them (comm/config.h readEngineKnobsFromEnv). Rank and size are set per link.
  Options engine;
  std::chrono::milliseconds connectTimeout{10000};
  bool verbose = false;     // NEZHA_VERBOSE=1: INFO lines to stderr when NCCL gave no logger
  std::string controlAddr;  // NEZHA_NCCL_CONTROL_ADDR: /status, /metrics, signed drain/restore
  int localRank = 0;
  int localWorldSize = 1;  // processes in this pod, each with its own plugin (and port)
  std::string jobName;
  // NEZHA_TCP_CONGESTION resolved (src/base/congestion_control.h): the name the rail sockets
  // set, or empty = the host's default.
  std::string tcpCongestion;
  // NEZHA_JOB_TOKEN_FILE or NEZHA_JOB_TOKEN: what every rail connection proves, and what signs
  // the control endpoint's drain/restore requests. Required.
  std::string jobToken;

  // Reads NEZHA_RAILS, NEZHA_NCCL_*, the engine's knobs and the job token; throws ConfigError
  // naming the variable, and for a retired plugin-only knob that is set, its replacement.
  static PluginConfig fromEnv();
};

class PluginContext {
 public:
  PluginContext(PluginConfig config, ncclDebugLogger_t logger);
  ~PluginContext();
  PluginContext(const PluginContext&) = delete;
  PluginContext& operator=(const PluginContext&) = delete;
  // Starts the control endpoint when NEZHA_NCCL_CONTROL_ADDR is set (throws ConfigError):
  // control/rail_routes.h's routes, a drain/restore taking effect in this process at once.
  void startControl();
  int controlPort() const;  // 0 when the endpoint is off
  // Watches the carrier of every rail's interface for the whole process (failover/link_watch.h),
  // as the communicator does for its ranks: a rail whose link goes down leaves every live
  // connection at once (reason "carrier"), not at its progress deadline, and no connection
  // rebuilds it before its link is back. Where netlink cannot be opened it warns once and
  // detection rests on the deadlines.
  void startLinkWatch();
  // Drained by the operator: the comms of this process take the rail out of both directions
  // (senders stop using it, receivers drop it and stop listening on it) until it is restored.
  bool drained(size_t rail) const { return drained_[rail].load(std::memory_order_relaxed); }
  // False (and nothing changes) when draining it would leave no rail. Reaches every live
  // connection's engine (EngineLink::request), applied at its next agreed round.
  bool setDrained(size_t rail, bool drained);
  // The connections the operator's drains and restores (and the link watch's carrier events)
  // reach: a link joins when its comm is handed to NCCL (taking the rails drained so far, and
  // those whose link is down, out at once) and leaves before it is closed.
  void attach(EngineLink* link);
  void detach(EngineLink* link);
  // A connection found `rail` silent (a black hole meets every connection of the process that
  // crosses it): the others judge the rail by a short quiet from now on, for a while
  // (FailoverEngine::suspectRail), instead of each waiting out its own progress deadline.
  void onRailSilent(const EngineLink* finder, int rail);
  // Prometheus text of what every connection's engine did, closed ones included (the runtime's
  // nezha_runtime_* names), and the drained gauge.
  std::string metricsText() const;
  const PluginConfig& config() const { return config_; }
  // NCCL's logger when it gave one, else stderr for warnings (the harness runs without NCCL).
  void warn(const std::string& msg) const;
  void info(const std::string& msg) const;
  // {"rails":[{"name":..,"bytes_sent":..,"bytes_received":..,"failures":..,"readmissions":..,
  //   "drained":..}],"last_failure":".."}: the same totals as metricsText().
  std::string statsJson() const;
  void noteFailure(const std::string& what);

 private:
  void onLink(size_t rail, bool up);

  PluginConfig config_;
  ncclDebugLogger_t logger_;
  std::array<std::atomic<bool>, kMaxRails> drained_{};
  ControlRequestVerifier verifier_;
  mutable std::mutex mu_;
  std::string lastFailure_;
  std::vector<EngineLink*> links_;            // under mu_
  std::array<bool, kMaxRails> linkDown_{};    // carrier lost, as last reported; under mu_
  LinkCounters closedSent_, closedReceived_;  // of links detached already, under mu_
  struct Totals {
    LinkCounters sent, received;
  };
  Totals totals() const;
  std::unique_ptr<ControlServer> control_;
  // Last: its thread calls onLink, so it stops before the state above goes away.
  std::unique_ptr<LinkWatcher> watcher_;
};

}  // namespace nezha::ncclnet
