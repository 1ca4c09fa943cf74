// The control endpoint's side of the communicator: drain/restore requests applied at an agreed
// operation, and the /status and /metrics snapshots the HTTP thread serves (refreshed after
// every operation under statusMu, so the HTTP thread never touches live state).
#include <algorithm>

#include "bootstrap/auth.h"
#include "core/communicator_impl.h"
#include "core/error.h"
#include "util/json.h"

namespace nezha {

using Impl = Communicator::Impl;

void Impl::applyControl(const std::vector<double>& agreed) {
  const size_t n = rails.size();
  std::vector<bool> alive = sched->alive();
  bool changed = false;
  for (size_t r = 0; r < n; ++r) {
    const bool drain = agreed[r] > 0, restore = agreed[n + r] > 0;
    int mine = controlRequest[r]->load();
    if (drain && alive[r] && std::count(alive.begin(), alive.end(), true) > 1) {
      alive[r] = false;
      drained[r] = true;
      changed = true;
    } else if (restore && drained[r] && !localDown[r]) {
      alive[r] = true;
      drained[r] = false;
      changed = true;
    }
    // Requests seen by the agreement are done (applied, or moot); clear only those.
    if ((mine == kDrain && drain) || (mine == kRestore && restore)) {
      controlRequest[r]->compare_exchange_strong(mine, 0);
    }
  }
  if (changed) sched->setAlive(alive);
}

void Impl::publish() {
  Json st = Json::object();
  st["rank"] = o.rank;
  st["world_size"] = o.worldSize;
  st["ops"] = metrics.ops;
  Json rs = Json::array();
  const std::vector<int> openPeers = mesh ? mesh->openPeers() : std::vector<int>{};
  std::string prom = strCat(
      "# TYPE nezha_ops_total counter\nnezha_ops_total ", metrics.ops,
      "\n# TYPE nezha_failovers_total counter\nnezha_failovers_total ", metrics.failovers.size(),
      "\n# TYPE nezha_readmissions_total counter\nnezha_readmissions_total ",
      metrics.readmissions.size(),
      "\n# TYPE nezha_replayed_slices_total counter\nnezha_replayed_slices_total ",
      metrics.replayedSlices, "\n");
  std::string up = "# TYPE nezha_rail_up gauge\n",
              bytes = "# TYPE nezha_rail_bytes_total counter\n",
              secs = "# TYPE nezha_rail_busy_seconds_total counter\n",
              share = "# TYPE nezha_rail_split_ratio gauge\n";
  for (size_t r = 0; r < rails.size(); ++r) {
    const std::string& name = rails[r].name;
    const RailMetrics& m = metrics.rails[name];
    const bool alive = sched ? sched->alive()[r] : true;
    std::string state = alive ? "healthy" : drained.size() > r && drained[r] ? "drained" : "failed";
    if (!alive && state == "failed" && o.worldSize > 1 && readyLocally(static_cast<int>(r))) {
      state = "probing";  // hold-down passed here; re-enters once every rank agrees
    }
    Json j = Json::object();
    j["name"] = name;
    j["state"] = state;
    j["bytes"] = m.bytes;
    j["split"] = last.split.count(name) ? last.split.at(name) : 0.0;
    // Ranks verified reachable on this rail: this one plus the peers whose control connection
    // on it is open (a cut rail's connections are dropped by TCP_USER_TIMEOUT); none while the
    // rail is failed.
    const bool failed = state == "failed" || state == "probing";
    j["ranks_reachable"] = failed ? 0 : 1 + (r < openPeers.size() ? openPeers[r] : 0);
    rs.push_back(j);
    const std::string lbl = strCat("{rail=\"", name, "\"}");
    up += strCat("nezha_rail_up", lbl, " ", alive ? 1 : 0, "\n");
    bytes += strCat("nezha_rail_bytes_total", lbl, " ", m.bytes, "\n");
    secs += strCat("nezha_rail_busy_seconds_total", lbl, " ", m.seconds, "\n");
    share += strCat("nezha_rail_split_ratio", lbl, " ",
                    last.split.count(name) ? last.split.at(name) : 0.0, "\n");
  }
  st["rails"] = rs;
  st["failovers"] = metrics.failovers.size();
  st["readmissions"] = metrics.readmissions.size();
  st["replayed_slices"] = metrics.replayedSlices;
  std::lock_guard<std::mutex> lock(statusMu);
  statusJson = dumpJson(st);
  metricsText = prom + up + bytes + secs + share;
}

HttpReply Impl::handleControl(const HttpRequest& req) {
  const std::string& path = req.path;
  if (path == "/status" || path == "/metrics") {
    // Read-only and open, so Prometheus can scrape it (docs/security.md).
    if (req.method != "GET") return {405, "text/plain", "use GET\n", ""};
    std::lock_guard<std::mutex> lock(statusMu);
    if (path == "/status") return {200, "application/json", statusJson + "\n", ""};
    return {200, "text/plain; version=0.0.4", metricsText, ""};
  }
  const std::string prefix = "/rails/";
  if (path.compare(0, prefix.size(), prefix) != 0) {
    return {404, "text/plain", "want GET /status, GET /metrics, POST /rails/{name}/drain|restore\n",
            ""};
  }
  const std::string rest = path.substr(prefix.size());
  const size_t slash = rest.find('/');
  const std::string name = rest.substr(0, slash);
  const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (action != "drain" && action != "restore") {
    return {404, "text/plain", "want /rails/{name}/drain or /rails/{name}/restore\n", ""};
  }
  if (req.method != "POST") return {405, "text/plain", "use POST\n", ""};
  // Everything that changes the job is authenticated; checked before anything else is looked
  // at, so an unauthenticated client learns nothing about the job's rails.
  if (HttpReply denied; !authorized(req, denied)) return denied;
  for (size_t r = 0; r < rails.size(); ++r) {
    if (rails[r].name != name) continue;
    if (o.worldSize == 1) return {409, "text/plain", "single-rank job has no rails in use\n", ""};
    controlRequest[r]->store(action == "drain" ? kDrain : kRestore);
    return {202, "application/json",
            strCat("{\"rail\":\"", name, "\",\"action\":\"", action,
                   "\",\"applied\":\"at the next operation, on every rank\"}\n"),
            ""};
  }
  return {404, "text/plain", strCat("no rail named \"", name.substr(0, 64), "\"\n"), ""};
}

// Mutating requests carry "Authorization: Bearer <controlCredential(job token)>".
bool Impl::authorized(const HttpRequest& req, HttpReply& denied) const {
  const std::string challenge = "WWW-Authenticate: Bearer realm=\"nezha-control\"\r\n";
  auto it = req.headers.find("authorization");
  if (it == req.headers.end()) {
    denied = {401, "text/plain",
              "missing credential: send \"Authorization: Bearer <hex HMAC-SHA256(job token, "
              "\\\"nezha/control/v1\\\")>\" (see docs/security.md)\n",
              challenge};
    return false;
  }
  const std::string bearer = "Bearer ";
  const std::string& value = it->second;
  if (value.compare(0, bearer.size(), bearer) != 0 ||
      !controlCredentialMatches(o.jobToken, value.substr(bearer.size()))) {
    denied = {401, "text/plain", "wrong credential for this job's control endpoint\n", challenge};
    return false;
  }
  return true;
}

}  // namespace nezha
