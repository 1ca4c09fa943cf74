// What the control endpoint answers, shared by every process that serves it — the
// communicator (comm/control_status.cc) and the NCCL plugin (nccl/plugin_control.cc): GET
// /status and /metrics open (Prometheus scrapes them), POST /rails/{name}/drain|restore only
// with a fresh request signature made with the job token (control/request_auth.h), checked
// before anything about the job's rails is looked at. The caller supplies the documents and
// the effect; the routes, the verdicts and their wording are the same everywhere, so the
// operator steers a collective job's rails and an NCCL job's rails alike.
#pragma once

#include <functional>
#include <string>

#include "control/control_server.h"
#include "control/http_request.h"
#include "control/request_auth.h"

namespace nezha {

struct RailRoutes {
  std::function<std::string()> statusJson;   // GET /status body (without the final newline)
  std::function<std::string()> metricsText;  // GET /metrics body
  // The index of the rail named `name`, or -1.
  std::function<int(const std::string& name)> railIndex;
  // A signed drain (drain = true) or restore of an existing rail: the reply to send.
  std::function<HttpReply(int rail, const std::string& name, bool drain)> apply;
  std::string jobToken;  // signs the mutating requests (controlCredential of it)
  ControlRequestVerifier* verifier = nullptr;  // remembers spent nonces; outlives the routes
};

HttpReply routeControlRequest(const HttpRequest& req, const RailRoutes& routes);

// The 202 a successful drain/restore answers with; `applied` says when it takes effect.
HttpReply railActionAccepted(const std::string& name, bool drain, const std::string& applied);

}  // namespace nezha
