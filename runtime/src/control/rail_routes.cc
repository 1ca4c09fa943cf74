#include "control/rail_routes.h"

#include <chrono>

#include "base/error.h"
#include "bootstrap/auth.h"

namespace nezha {

namespace {

// Mutating requests are signed per request: a sniffed one cannot be replayed, moved to another
// rail or action, or kept for later.
bool authorized(const HttpRequest& req, const RailRoutes& routes, HttpReply& denied) {
  const std::string challenge =
      strCat("WWW-Authenticate: ", kControlAuthScheme, " realm=\"nezha-control\"\r\n");
  auto it = req.headers.find("authorization");
  if (it == req.headers.end()) {
    denied = {401, "text/plain",
              strCat("missing signature: send \"Authorization: ", kControlAuthScheme,
                     " ts=<unix seconds>, nonce=<hex>, sig=<hex HMAC-SHA256>\" (see "
                     "docs/security.md)\n"),
              challenge};
    return false;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string why = routes.verifier->check(controlCredential(routes.jobToken), req.method,
                                                 req.path, it->second, now);
  if (!why.empty()) {
    denied = {401, "text/plain", why + "\n", challenge};
    return false;
  }
  return true;
}

}  // namespace

HttpReply routeControlRequest(const HttpRequest& req, const RailRoutes& routes) {
  const std::string& path = req.path;
  if (path == "/status" || path == "/metrics") {
    // Read-only and open, so Prometheus can scrape it (docs/security.md).
    if (req.method != "GET") return {405, "text/plain", "use GET\n", ""};
    if (path == "/status") return {200, "application/json", routes.statusJson() + "\n", ""};
    return {200, "text/plain; version=0.0.4", routes.metricsText(), ""};
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
  if (HttpReply denied; !authorized(req, routes, denied)) return denied;
  const int rail = routes.railIndex(name);
  if (rail < 0)
    return {404, "text/plain", strCat("no rail named \"", name.substr(0, 64), "\"\n"), ""};
  return routes.apply(rail, name, action == "drain");
}

HttpReply railActionAccepted(const std::string& name, bool drain, const std::string& applied) {
  return {202, "application/json",
          strCat("{\"rail\":\"", name, "\",\"action\":\"", drain ? "drain" : "restore",
                 "\",\"applied\":\"", applied, "\"}\n"),
          ""};
}

}  // namespace nezha
