// Communicator: wires rendezvous, rail channels, rail threads, probe and scheduler together and
// turns each collective into per-rail slice tasks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "algorithms/algorithms.h"
#include "config.h"
#include "control_server.h"
#include "error.h"
#include "json.h"
#include "link_watch.h"
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
  uint64_t agreementRounds = 0;  // failure-agreement attempts, same sequence on every rank
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

  // ---- failover -------------------------------------------------------------------------
  // With Options::failover every operation ends with a failure agreement: each rank max-reduces
  // per-rail failure flags (1 = a slice on that rail failed here, or the rail is down here) over
  // the lowest-latency rail it still trusts. A rail flagged by any rank leaves the split on all
  // ranks at the same operation; the slices it carried are redone on the survivors from the
  // preserved inputs; slices on unflagged rails completed on every rank, so their results stand.
  // A rank that fails a rail shuts its connections, so peers blocked on that rail (or trying to
  // agree on it) fail fast instead of waiting for their deadline, and move to the next rail.
  std::vector<bool> localDown;  // rails this rank has shut (failed here or agreed dead)
  // Set by the link watcher thread when a rail's interface loses carrier.
  std::vector<std::unique_ptr<std::atomic<bool>>> linkDown;
  std::chrono::steady_clock::time_point opStart;

  void shutRail(int rail) {
    if (localDown[rail]) return;
    localDown[rail] = true;
    channels[rail]->abort();
  }

  // Max-reduces `flags` (one per rail) on a trusted rail; a rail failing during the agreement
  // is flagged and the next one tried. Throws RailError when no rail is left.
  void agreeFailures(std::vector<double>& flags, const std::vector<std::string>& errors) {
    std::vector<double> mine = flags;
    for (;;) {
      int r = -1;
      const int cold = sched->coldRail();
      if (sched->alive()[cold] && !localDown[cold]) {
        r = cold;
      } else {
        for (size_t i = 0; i < rails.size() && r < 0; ++i) {
          if (sched->alive()[i] && !localDown[i]) r = static_cast<int>(i);
        }
      }
      if (r < 0) allRailsDown(errors);
      // The round carries its sequence number (as n and -n: both maxima equal it only if every
      // rank sent it; rounds are numbered identically while ranks are in step). A cut can complete
      // a round on one rank but not on another (the last message was delivered one way only); the
      // rank that moved on then meets this rank's retry inside its next operation. The number check
      // turns that into a failure of the rail (and, if it repeats, a clear error) instead of a
      // result built from a mismatched message.
      const double opNo = static_cast<double>(++agreementRounds);
      std::vector<double> v{opNo, -opNo};
      v.insert(v.end(), mine.begin(), mine.end());
      TaskHandle h;
      // Peers still blocked on a failing rail (or in a re-admission connect) reach this round
      // up to one progress floor late.
      const auto limit = 3 * o.progressFloor;
      workers[r]->submit(
          [&] {
            channels[r]->setProgressTimeout(limit);
            nezha::allreduce(*channels[r], reinterpret_cast<char*>(v.data()), v.size(),
                             DataType::kFloat64, ReduceOp::kMax, scratch[r], algo);
          },
          &h);
      try {
        h.wait();
        bool valid = v[0] == opNo && v[1] == -opNo;
        for (size_t i = 2; i < v.size(); ++i) valid = valid && (v[i] == 0 || v[i] == 1);
        if (valid) {
          flags.assign(v.begin() + 2, v.end());
          return;
        }
        ++metrics.agreementMismatches;
      } catch (const RailError&) {
      }
      shutRail(r);
      mine[r] = 1;
    }
  }

  [[noreturn]] void allRailsDown(const std::vector<std::string>& errors) {
    std::string detail;
    for (size_t i = 0; i < errors.size(); ++i) {
      if (!errors[i].empty()) detail += strCat(detail.empty() ? "" : "; ", errors[i]);
    }
    failStop(
        RailError(-1, strCat("operation ", opCounter - 1, " failed: no rail left to finish it on (",
                             detail.empty() ? "every rail failed or was shut" : detail, ")")));
  }

  struct Outcome {
    std::vector<double> secs;  // per rail, summed over attempts
    std::vector<Slice> done;   // slices that completed on every rank
    bool replayed = false;
  };

  // Runs every slice on its rail concurrently and, with failover, redoes failed slices on the
  // surviving rails until every slice completed on every rank (or no rail is left: RailError).
  // `fn` must be re-runnable for a slice: it reads only preserved inputs.
  Outcome runSlices(const Plan& plan,
                    const std::function<void(Channel&, Scratch&, const Slice&)>& fn) {
    Outcome out;
    out.secs.assign(rails.size(), 0.0);
    std::vector<Slice> todo = plan.slices;
    while (!todo.empty()) {
      std::vector<TaskHandle> handles(todo.size());
      for (size_t i = 0; i < todo.size(); ++i) {
        const Slice s = todo[i];
        const double predicted = sched->predictSeconds(s.rail, s.count * plan.unitBytes);
        const auto deadline = std::max(
            o.progressFloor,
            std::chrono::milliseconds(static_cast<int64_t>(4000 * std::min(predicted, 1e6))));
        workers[s.rail]->submit(
            [&, s, deadline] {
              channels[s.rail]->setProgressTimeout(deadline);
              fn(*channels[s.rail], scratch[s.rail], s);
            },
            &handles[i]);
      }
      std::exception_ptr bug;  // a non-rail failure (a bug check) ends the communicator
      std::vector<double> failed(rails.size(), 0.0);
      std::vector<std::string> errors(rails.size());
      for (size_t i = 0; i < todo.size(); ++i) {
        try {
          handles[i].wait();
          out.secs[todo[i].rail] += handles[i].seconds();
        } catch (const RailError& e) {
          const int r = todo[i].rail;
          failed[r] = 1;
          errors[r] = linkDown[r]->load()
                          ? strCat("link of ", rails[r].iface, " went down; ", e.what())
                          : std::string(e.what());
        } catch (...) {
          if (!bug) bug = std::current_exception();
        }
      }
      if (bug) {
        for (auto& ch : channels) ch->abort();
        if (failure.empty()) failure = "an internal error";
        std::rethrow_exception(bug);
      }
      if (!o.failover) {
        for (size_t r = 0; r < rails.size(); ++r) {
          if (failed[r] > 0) failStop(RailError(static_cast<int>(r), errors[r]));
        }
        out.done = todo;
        return out;
      }
      for (size_t r = 0; r < rails.size(); ++r) {
        if (failed[r] > 0) shutRail(static_cast<int>(r));
      }
      // Second half of the round: per rail, 1 = this rank is not ready to re-admit it.
      const size_t n = rails.size();
      failed.resize(4 * n, 1.0);
      for (size_t r = 0; r < n; ++r) {
        // Third and fourth blocks: drain / restore asked on this rank's control endpoint.
        const int req = controlRequest[r]->load();
        failed[2 * n + r] = req == kDrain ? 1.0 : 0.0;
        failed[3 * n + r] = req == kRestore ? 1.0 : 0.0;
      }
      for (size_t r = 0; r < n; ++r) {
        if (!sched->alive()[r] && !drained[r] && !readmitting &&
            readyLocally(static_cast<int>(r))) {
          failed[n + r] = 0;
        }
      }
      agreeFailures(failed, errors);
      ready.clear();
      for (size_t r = 0; r < n; ++r) {
        if (failed[n + r] == 0 && failed[r] == 0) ready.push_back(static_cast<int>(r));
      }
      applyControl(std::vector<double>(failed.begin() + 2 * n, failed.end()));
      failed.resize(n);
      std::vector<Slice> redo;
      for (const Slice& s : todo) (failed[s.rail] > 0 ? redo : out.done).push_back(s);
      std::vector<bool> alive = sched->alive();
      bool changed = false;
      for (size_t r = 0; r < rails.size(); ++r) {
        if (failed[r] == 0 || !alive[r]) continue;
        alive[r] = false;
        changed = true;
        shutRail(static_cast<int>(r));
        recordFailover(static_cast<int>(r), errors[r]);
      }
      if (!changed && redo.empty()) break;
      if (std::none_of(alive.begin(), alive.end(), [](bool a) { return a; })) {
        allRailsDown(errors);
      }
      sched->setAlive(alive);
      if (redo.empty()) break;
      out.replayed = true;
      metrics.replayedSlices += redo.size();
      todo = sched->resplit(plan, redo);
    }
    if (!ready.empty() && !readmitting) readmit(ready);
    return out;
  }

  // ---- re-admission ---------------------------------------------------------------------
  // A failed rail comes back when every rank is ready (carrier up and nothing bad seen on it
  // for its hold-down), decided in the failure agreement at the end of an operation, so all
  // ranks rebuild it at the same point: fresh listening sockets, ports shared over the
  // survivors, connections whose handshake names the rail's new generation (bytes of the old
  // connections can never be taken for the new ones), a probe allreduce, then a second
  // agreement that every rank succeeded. The hold-down doubles each time the rail fails
  // again (flap damping, capped at 60 s).
  std::vector<int> ready;       // rails agreed ready in the last round
  bool readmitting = false;     // re-admission's own rounds must not start another one
  std::vector<int> generation;  // per rail, bumped per re-admission attempt
  std::vector<std::chrono::steady_clock::time_point> failedAt;
  std::vector<std::chrono::milliseconds> holdDown;
  std::vector<std::unique_ptr<std::atomic<int64_t>>> linkUpAt;  // steady ns; watcher thread
  std::mutex channelMu;  // channels[r] swap vs. abort from the watcher / abortRail threads
  JobTable job;

  bool readyLocally(int r) const {
    if (o.readmitHoldDown.count() == 0 || linkDown[r]->load()) return false;
    const auto now = std::chrono::steady_clock::now();
    const auto upAt =
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(linkUpAt[r]->load()));
    return now - failedAt[r] >= holdDown[r] && now - upAt >= holdDown[r];
  }

  void agreeValues(std::vector<double>& v) {
    const std::vector<double> orig = v;
    runUnit([&](Channel& ch, Scratch& s) {
      v = orig;
      nezha::allreduce(ch, reinterpret_cast<char*>(v.data()), v.size(), DataType::kFloat64,
                       ReduceOp::kMax, s, algo);
    });
  }

  void readmit(const std::vector<int>& railsReady) {
    readmitting = true;
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{readmitting};
    const int n = o.worldSize;
    for (int r : railsReady) {
      const auto t0 = std::chrono::steady_clock::now();
      ++generation[r];
      std::unique_ptr<TcpChannel> fresh;
      std::string err;
      try {
        fresh = std::make_unique<TcpChannel>(o, r, rails[r].address);
      } catch (const Error& e) {
        err = e.what();
      }
      std::vector<double> ports(n + 1, 0.0);
      ports[o.rank] = fresh ? fresh->endpoint().port : 0;
      ports[n] = fresh ? 0 : 1;
      agreeValues(ports);
      if (ports[n] == 0) {
        JobTable jt = job;
        jt.session += strCat("/rail", r, "/gen", generation[r]);
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
      } else if (err.empty()) {
        err = "a peer could not open its listening socket";
      }
      std::vector<double> bad{err.empty() ? 0.0 : 1.0};
      agreeValues(bad);
      if (bad[0] > 0) {
        if (fresh) fresh->abort();
        failedAt[r] = std::chrono::steady_clock::now();
        holdDown[r] = std::min(2 * holdDown[r], std::chrono::milliseconds(60000));
        if (o.verbose) {
          std::fprintf(stderr, "nezha: rank %d: re-admitting rail %s failed (%s)\n", o.rank,
                       rails[r].name.c_str(), err.empty() ? "on a peer" : err.c_str());
        }
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(channelMu);
        channels[r] = std::move(fresh);
      }
      localDown[r] = false;
      std::vector<bool> alive = sched->alive();
      alive[r] = true;
      sched->setAlive(alive);
      metrics.rails[rails[r].name].alive = true;
      FailoverEvent ev;
      ev.op = opCounter - 1;
      ev.rail = rails[r].name;
      ev.unixSeconds =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      ev.stallSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      metrics.readmissions.push_back(ev);
      // A rail that fails again soon after coming back waits longer next time.
      holdDown[r] = std::min(2 * holdDown[r], std::chrono::milliseconds(60000));
      if (o.verbose) {
        std::fprintf(stderr, "nezha: rank %d: rail %s re-admitted after op %llu\n", o.rank,
                     ev.rail.c_str(), static_cast<unsigned long long>(ev.op));
      }
    }
  }

  // ---- control endpoint: drain / restore at an agreed operation ---------------------------
  static constexpr int kDrain = 1, kRestore = 2;
  std::vector<std::unique_ptr<std::atomic<int>>> controlRequest;  // set by the HTTP thread
  std::vector<bool> drained;  // out of the split on request (connections kept)

  void applyControl(const std::vector<double>& agreed) {
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

  // Snapshot for the HTTP thread, refreshed after every operation (statusMu).
  std::mutex statusMu;
  std::string statusJson = "{}", metricsText;

  void publish() {
    Json st = Json::object();
    st.set("rank", o.rank);
    st.set("world_size", o.worldSize);
    st.set("ops", static_cast<double>(metrics.ops));
    Json rs = Json::array();
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
      std::string state = alive                              ? "healthy"
                          : drained.size() > r && drained[r] ? "drained"
                                                             : "failed";
      if (!alive && state == "failed" && o.worldSize > 1 && readyLocally(static_cast<int>(r))) {
        state = "probing";  // hold-down passed here; re-enters once every rank agrees
      }
      Json j = Json::object();
      j.set("name", name);
      j.set("state", state);
      j.set("bytes", static_cast<double>(m.bytes));
      j.set("split", last.split.count(name) ? last.split.at(name) : 0.0);
      // Ranks this rail reached in its last completed operation: all of them while it is up.
      j.set("ranks_reachable", alive ? o.worldSize : 0);
      rs.push(j);
      const std::string lbl = strCat("{rail=\"", name, "\"}");
      up += strCat("nezha_rail_up", lbl, " ", alive ? 1 : 0, "\n");
      bytes += strCat("nezha_rail_bytes_total", lbl, " ", m.bytes, "\n");
      secs += strCat("nezha_rail_busy_seconds_total", lbl, " ", m.seconds, "\n");
      share += strCat("nezha_rail_split_ratio", lbl, " ",
                      last.split.count(name) ? last.split.at(name) : 0.0, "\n");
    }
    st.set("rails", rs);
    st.set("failovers", static_cast<double>(metrics.failovers.size()));
    st.set("readmissions", static_cast<double>(metrics.readmissions.size()));
    st.set("replayed_slices", static_cast<double>(metrics.replayedSlices));
    std::lock_guard<std::mutex> lock(statusMu);
    statusJson = st.dump();
    metricsText = prom + up + bytes + secs + share;
  }

  HttpReply handleControl(const std::string& method, const std::string& path) {
    if (path == "/status" || path == "/metrics") {
      if (method != "GET") return {405, "text/plain", "use GET\n"};
      std::lock_guard<std::mutex> lock(statusMu);
      if (path == "/status") return {200, "application/json", statusJson + "\n"};
      return {200, "text/plain; version=0.0.4", metricsText};
    }
    const std::string prefix = "/rails/";
    if (path.compare(0, prefix.size(), prefix) == 0) {
      const std::string rest = path.substr(prefix.size());
      const size_t slash = rest.find('/');
      const std::string name = rest.substr(0, slash);
      const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
      if (action != "drain" && action != "restore") {
        return {404, "text/plain", "want /rails/{name}/drain or /rails/{name}/restore\n"};
      }
      if (method != "POST") return {405, "text/plain", "use POST\n"};
      for (size_t r = 0; r < rails.size(); ++r) {
        if (rails[r].name != name) continue;
        if (o.worldSize == 1) return {409, "text/plain", "single-rank job has no rails in use\n"};
        controlRequest[r]->store(action == "drain" ? kDrain : kRestore);
        return {202, "application/json",
                strCat("{\"rail\":\"", name, "\",\"action\":\"", action,
                       "\",\"applied\":\"at the next operation, on every rank\"}\n")};
      }
      return {404, "text/plain", strCat("no rail named \"", name.substr(0, 64), "\"\n")};
    }
    return {404, "text/plain",
            "want GET /status, GET /metrics, POST /rails/{name}/drain|restore\n"};
  }

  void recordFailover(int rail, const std::string& localError) {
    FailoverEvent ev;
    ev.op = opCounter - 1;
    ev.rail = rails[rail].name;
    ev.unixSeconds =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ev.stallSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opStart).count();
    ev.localError = localError;
    metrics.failovers.push_back(ev);
    failedAt[rail] = std::chrono::steady_clock::now();
    metrics.rails[rails[rail].name].alive = false;
    if (o.verbose) {
      std::fprintf(stderr, "nezha: rank %d: rail %s left the split at op %llu (%s)\n", o.rank,
                   ev.rail.c_str(), static_cast<unsigned long long>(ev.op),
                   localError.empty() ? "reported by a peer" : localError.c_str());
    }
  }

  // A small control task (agreement, barrier) as a one-unit operation on the cold rail, with
  // the same failover as data slices. `fn` must be re-runnable.
  void runUnit(const std::function<void(Channel&, Scratch&)>& fn) {
    Plan p;
    p.units = 1;
    p.slices.push_back(Slice{sched->coldRail(), 0, 1});
    runSlices(p, [&](Channel& ch, Scratch& s, const Slice&) { fn(ch, s); });
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
    opStart = std::chrono::steady_clock::now();
    uint64_t n = opCounter++;
    if (o.worldSize > 1 && sched->agreementDue(n)) {
      std::vector<double> stats = sched->pendingStats();
      if (!stats.empty()) {
        auto agree = [this](std::vector<double>& v) { agreeValues(v); };
        // First a fixed-size round: same operations and same number of statistics everywhere
        // (max(x) == x and max(-x) == -x on every rank iff all ranks hold x).
        double sig = signature, len = static_cast<double>(stats.size());
        std::vector<double> check{sig, -sig, len, -len};
        agree(check);
        if (check[0] != sig || check[1] != -sig || check[2] != len || check[3] != -len) {
          throw ConfigError(
              strCat("ranks called different collectives or sizes between "
                     "operations ",
                     signatureSince, " and ", n - 1,
                     " (every rank must call the same collectives with the same "
                     "sizes in the same order)"));
        }
        agree(stats);
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

  void report(OpKind op, const Plan& plan, const Outcome& outcome) {
    Plan ran = plan;
    ran.slices = outcome.done;
    report(op, ran, outcome.secs);
    last.replayed = outcome.replayed;
  }

  void report(OpKind op, const Plan& plan, const std::vector<double>& secs) {
    ++metrics.ops;
    if (plan.hot) ++metrics.hotOps;
    std::vector<bool> used(rails.size(), false);
    for (const Slice& s : plan.slices) {
      RailMetrics& m = metrics.rails[rails[s.rail].name];
      ++m.slices;
      m.bytes += s.count * plan.unitBytes;
      if (!used[s.rail] && !secs.empty()) m.seconds += secs[s.rail];
      used[s.rail] = true;
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
      last.split[name] += plan.units ? static_cast<double>(s.count) / plan.units : 0;
      last.railBytes[name] += s.count * plan.unitBytes;
      last.railSeconds[name] = secs.empty() ? 0 : secs[s.rail];
    }
    if (control) publish();
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

  // Last members: stop (join) before the state they read is destroyed.
  std::unique_ptr<LinkWatcher> watcher;
  std::unique_ptr<ControlServer> control;
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
    m.job = job;
    Deadline deadline = Clock::now() + m.o.rendezvousTimeout;
    for (auto& ch : tcp) ch->connect(job, deadline);
    for (auto& ch : tcp) m.channels.push_back(std::move(ch));
    for (size_t i = 0; i < m.channels.size(); ++i) {
      m.workers.push_back(std::make_unique<RailWorker>());
    }
    m.scratch.resize(m.channels.size());
    m.localDown.assign(m.channels.size(), false);
    std::vector<std::string> ifaces;
    for (const auto& r : m.rails) {
      ifaces.push_back(r.iface);
      m.linkDown.push_back(std::make_unique<std::atomic<bool>>(false));
      m.linkUpAt.push_back(std::make_unique<std::atomic<int64_t>>(0));
    }
    m.generation.assign(m.rails.size(), 0);
    m.failedAt.assign(m.rails.size(), std::chrono::steady_clock::time_point{});
    m.holdDown.assign(m.rails.size(), m.o.readmitHoldDown);
    m.drained.assign(m.rails.size(), false);
    for (size_t i = 0; i < m.rails.size(); ++i) {
      m.controlRequest.push_back(std::make_unique<std::atomic<int>>(0));
    }
    try {
      m.watcher = std::make_unique<LinkWatcher>(
          ifaces,
          [&m](size_t i) {
            if (m.linkDown[i]->exchange(true)) return;
            std::lock_guard<std::mutex> lock(m.channelMu);
            m.channels[i]->abort();  // thread-safe: fails the rail's exchange in flight now
          },
          [&m](size_t i) {
            if (!m.linkDown[i]->exchange(false)) return;
            m.linkUpAt[i]->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
          });
    } catch (const Error& e) {
      // Detection then rests on the per-slice progress deadline alone; say so once.
      std::fprintf(stderr, "nezha: rank %d: %s; rail failures are detected by deadline only\n",
                   m.o.rank, e.what());
    }
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
  if (!m.o.controlAddr.empty()) {
    m.control = std::make_unique<ControlServer>(
        m.o.controlAddr, [&m](const std::string& method, const std::string& path) {
          return m.handleControl(method, path);
        });
    m.publish();
  }
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
  if (impl_->channels.empty()) return;
  std::lock_guard<std::mutex> lock(impl_->channelMu);
  impl_->channels[rail]->abort();
}

int Communicator::controlPort() const { return impl_->control ? impl_->control->port() : 0; }

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
    m.report(OpKind::kAllreduce, Plan{OpKind::kAllreduce, false, {}, count, es, {}},
             std::vector<double>{});
    return;
  }
  // In place, a failed slice's original data would be gone before its replay: keep a copy.
  std::vector<char> preserved;
  if (m.o.failover && in == out && count > 0) {
    preserved.assign(in, in + count * es);
    in = preserved.data();
  }
  Plan plan = m.sched->plan(OpKind::kAllreduce, count, es);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    char* b = out + sl.offset * es;
    if (in != out) std::memcpy(b, in + sl.offset * es, sl.count * es);
    nezha::allreduce(ch, b, sl.count, dtype, op, s, m.algo);
  });
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kAllreduce, plan, ran);
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
    m.report(OpKind::kBroadcast, Plan{OpKind::kBroadcast, false, {}, count, es, {}},
             std::vector<double>{});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kBroadcast, count, es);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    nezha::broadcast(ch, b + sl.offset * es, sl.count * es, root, m.algo);
  });
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kBroadcast, plan, ran);
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
    m.report(OpKind::kAllgather, Plan{OpKind::kAllgather, false, {}, count, es * n, {}},
             std::vector<double>{});
    return;
  }
  Plan plan = m.sched->plan(OpKind::kAllgather, count, es * n);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch&, const Slice& sl) {
    if (in != mine) std::memcpy(mine + sl.offset * es, in + sl.offset * es, sl.count * es);
    allgatherRing(ch, out + sl.offset * es, count * es, sl.count * es);
  });
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kAllgather, plan, ran);
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
             std::vector<double>{});
    return;
  }
  // An output overlapping the input would overwrite data a replay still needs.
  std::vector<char> preserved;
  if (m.o.failover && recvcount > 0 && out < in + n * recvcount * es && in < out + recvcount * es) {
    preserved.assign(in, in + n * recvcount * es);
    in = preserved.data();
  }
  Plan plan = m.sched->plan(OpKind::kReduceScatter, recvcount, es * n);
  Impl::Outcome ran = m.runSlices(plan, [&](Channel& ch, Scratch& s, const Slice& sl) {
    reduceScatterRing(ch, in + sl.offset * es, recvcount * es, out + sl.offset * es, sl.count,
                      dtype, op, s);
  });
  if (!ran.replayed) m.sched->record(plan, ran.secs);
  m.report(OpKind::kReduceScatter, plan, ran);
}

void Communicator::barrier() {
  Impl& m = *impl_;
  m.beginOp(OpKind::kBarrier, 0, DataType::kInt32, 0);
  ++m.metrics.ops;
  if (m.o.worldSize == 1) return;
  m.runUnit([](Channel& ch, Scratch&) { barrierDissemination(ch); });
}

}  // namespace nezha
