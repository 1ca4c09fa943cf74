// Re-admission: a failed rail comes back when every rank is ready (carrier up and nothing bad
// seen on it for its hold-down), decided in the failure agreement at the end of an operation,
// so all ranks rebuild it at the same point: fresh listening sockets, ports shared on the
// control mesh, connections whose handshake names the rail's new generation (bytes of the old
// connections can never be taken for the new ones), a probe allreduce, then a second agreement
// that every rank succeeded. The hold-down doubles each time the rail fails again (flap
// damping, capped at 60 s).
#include <algorithm>
#include <cstdio>

#include "core/communicator_impl.h"
#include "core/error.h"
#include "transport/transport.h"

namespace nezha {

using Impl = Communicator::Impl;

namespace {
constexpr std::chrono::milliseconds kMaxHoldDown{60000};
}

bool Impl::readyLocally(int r) const {
  if (o.readmitHoldDown.count() == 0 || linkDown[r]->load()) return false;
  const auto now = std::chrono::steady_clock::now();
  const auto upAt =
      std::chrono::steady_clock::time_point(std::chrono::nanoseconds(linkUpAt[r]->load()));
  return now - failedAt[r] >= holdDown[r] && now - upAt >= holdDown[r];
}

void Impl::readmit(const std::vector<int>& railsReady) {
  readmitting = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{readmitting};
  for (int r : railsReady) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string err;
    std::unique_ptr<Transport> fresh = rebuildRail(r, err);
    // Every rank must have succeeded, or the rail stays out everywhere.
    std::vector<double> bad{err.empty() ? 0.0 : 1.0};
    agree(bad, o.ioTimeout);
    if (bad[0] > 0) {
      if (fresh) fresh->abort();
      failedAt[r] = std::chrono::steady_clock::now();
      holdDown[r] = std::min(2 * holdDown[r], kMaxHoldDown);
      if (o.verbose) {
        std::fprintf(stderr, "nezha: rank %d: re-admitting rail %s failed (%s)\n", o.rank,
                     rails[r].name.c_str(), err.empty() ? "on a peer" : err.c_str());
      }
      continue;
    }
    installRail(r, std::move(fresh), t0);
  }
}

// A new generation of rail r: fresh listening socket, ports agreed on the mesh, connections
// under a session named after the generation, a probe allreduce. On failure returns what it
// has (possibly nothing) and sets `err`.
std::unique_ptr<Transport> Impl::rebuildRail(int r, std::string& err) {
  const int n = o.worldSize;
  const uint64_t gen = generation[r]->fetch_add(1) + 1;
  std::unique_ptr<Transport> fresh;
  try {
    fresh = makeTransport(o, r, rails[r].address);
    fresh->setHealthListener([this, r](const std::string& why) { onTransportFault(r, why); });
  } catch (const Error& e) {
    err = e.what();
  }
  std::vector<double> ports(n + 1, 0.0);
  ports[o.rank] = fresh ? fresh->endpoint().port : 0;
  ports[n] = fresh ? 0 : 1;
  agree(ports, o.ioTimeout);
  if (ports[n] != 0) {
    if (err.empty()) err = "a peer could not open its listening socket";
    return fresh;
  }
  JobTable jt = job;
  jt.session += strCat("/rail", r, "/gen", gen);
  for (int p = 0; p < n; ++p) jt.ranks[p].rails[r].port = static_cast<int>(ports[p]);
  try {
    fresh->connect(jt, Clock::now() + o.progressFloor);
    fresh->setProgressTimeout(2 * o.progressFloor);
    std::vector<double> probe{1.0};
    nezha::allreduce(*fresh, reinterpret_cast<char*>(probe.data()), 1, DataType::kFloat64,
                     ReduceOp::kSum, scratch[r], algo);
    if (probe[0] != n) err = strCat("probe allreduce gave ", probe[0]);
  } catch (const Error& e) {
    err = e.what();
  }
  return fresh;
}

// Puts the rebuilt rail back into the split on this rank (every rank does the same now).
void Impl::installRail(int r, std::unique_ptr<Transport> fresh,
                       std::chrono::steady_clock::time_point t0) {
  mesh->attach(r, fresh->releaseControl());
  {
    std::lock_guard<std::mutex> lock(channelMu);
    channels[r] = std::move(fresh);
    faultWhy[r].clear();
  }
  reportedDownBy[r]->store(0);
  localDown[r] = false;
  std::vector<bool> alive = sched->alive();
  alive[r] = true;
  sched->setAlive(alive);
  metrics.rails[rails[r].name].alive = true;
  FailoverEvent ev;
  ev.op = opCounter - 1;
  ev.rail = rails[r].name;
  ev.unixSeconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ev.stallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics.readmissions.push_back(ev);
  // A rail that fails again soon after coming back waits longer next time.
  holdDown[r] = std::min(2 * holdDown[r], kMaxHoldDown);
  if (o.verbose) {
    std::fprintf(stderr, "nezha: rank %d: rail %s re-admitted after op %llu\n", o.rank,
                 ev.rail.c_str(), static_cast<unsigned long long>(ev.op));
  }
}

}  // namespace nezha
