#include "bench_loop.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "base/json.h"

namespace nezha::tools {
namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct OpRecord {
  double endUnix, durationUs;
  std::map<std::string, double> split;
  bool replayed;
};

struct LoopRun {
  size_t count = 0;  // floats per operation
  double startUnix = 0;
  std::vector<OpRecord> ops;
  long wrongOps = 0;
  std::string error;  // the operation that failed, if one did
  double errorUnix = 0;
};

// Operations done before --ready-file appears: past the first (which also connects lazily built
// state) and enough for the split to reflect measured timing, yet a fraction of a second.
constexpr size_t kLoopReadyOps = 20;

// Values of the stop flag (element 0 of every loop allreduce; only rank 0 adds a non-zero one).
constexpr float kStopNone = 0.0f, kStopTimeUp = 1.0f, kStopError = 2.0f;

// Written to a temporary name and renamed, so a harness polling for the file never sees it
// half-made. Returns "" or what went wrong.
std::string createReadyFile(const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return strCat("cannot create --ready-file ", path, ": ", std::strerror(errno));
  const bool written = std::fputs("running\n", f) >= 0;
  const int writeErrno = errno;
  // Closed on every path: a failed write must not leak the FILE.
  if (std::fclose(f) != 0 || !written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = strCat("cannot create --ready-file ", path, ": ",
                             std::strerror(written ? errno : writeErrno));
    std::remove(tmp.c_str());  // no half-made file left behind
    return why;
  }
  return "";
}

// Element 0 carries the stop flag (rank 0 sets it once its time is up, or on an error of its own),
// so every rank stops after the same operation without a separate round. The other elements are
// rank+1 and must sum to exactly world(world+1)/2 in every operation (float32 is exact for these
// integers).
LoopRun loop(Communicator& c, const BenchArgs& a) {
  const int rank = c.rank(), world = c.worldSize();
  LoopRun run;
  run.count = std::max<size_t>(2, a.maxBytes / 4);
  std::vector<float> in(run.count, static_cast<float>(rank + 1)), out(run.count);
  const float want = static_cast<float>(world * (world + 1) / 2);
  run.startUnix = unixNow();
  const auto t0 = std::chrono::steady_clock::now();
  std::string readyError;
  for (;;) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // A ready file that cannot be made stops every rank after the next operation, as an error
    // on every rank (kStopError), so no rank waits in the final check for one that left.
    in[0] = rank != 0                  ? kStopNone
            : !readyError.empty()      ? kStopError
            : elapsed >= a.loopSeconds ? kStopTimeUp
                                       : kStopNone;
    const auto s = std::chrono::steady_clock::now();
    try {
      c.allreduce(in.data(), out.data(), run.count, DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      run.error = e.what();
      run.errorUnix = unixNow();
      std::fprintf(stderr, "nezha-bench: rank %d: %s\n", rank, e.what());
      break;
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count();
    size_t bad = 0;
    for (size_t j = 1; j < run.count; ++j) bad += out[j] != want;
    if (bad > 0) {
      ++run.wrongOps;
      std::fprintf(stderr, "nezha-bench: rank %d: op %zu has %zu wrong elements\n", rank,
                   run.ops.size(), bad);
    }
    run.ops.push_back(OpRecord{unixNow(), us, c.lastReport().split, c.lastReport().replayed});
    if (rank == 0 && !a.readyFile.empty() && run.ops.size() == kLoopReadyOps) {
      readyError = createReadyFile(a.readyFile);
      if (!readyError.empty())
        std::fprintf(stderr, "nezha-bench: rank 0: %s\n", readyError.c_str());
    }
    if (out[0] == kStopError && rank != 0) {
      readyError = "rank 0 could not create its --ready-file";
      std::fprintf(stderr, "nezha-bench: rank %d: %s\n", rank, readyError.c_str());
    }
    if (out[0] != kStopNone) break;
  }
  if (run.error.empty() && !readyError.empty()) {
    run.error = readyError;
    run.errorUnix = unixNow();
  }
  return run;
}

Json eventsJson(const std::vector<FailoverEvent>& evs) {
  Json arr = Json::array();
  for (const FailoverEvent& f : evs) {
    Json e = Json::object();
    e["op"] = f.op;
    e["rail"] = f.rail;
    e["t_unix"] = f.unixSeconds;
    e["stall_s"] = f.stallSeconds;
    e["local_error"] = f.localError;
    e["reason"] = f.reason;
    if (f.measuredBandwidth > 0) e["measured_bandwidth_bytes_per_s"] = f.measuredBandwidth;
    Json ranks = Json::array();
    for (int r : f.ranks) ranks.push_back(r);
    e["ranks"] = ranks;
    arr.push_back(e);
  }
  return arr;
}

// The trace the chaos harness reads (format in runtime/README.md). `ops` stays
// [end_unix, duration_us] (the shared contract); per-op detail is in parallel arrays.
Json traceJson(Communicator& c, const LoopRun& run, bool anyWrong) {
  Json root = Json::object();
  root["tool"] = "nezha-bench";
  root["mode"] = "loop";
  root["bytes"] = run.count * 4;
  root["world_size"] = c.worldSize();
  root["policy"] = toString(c.options().policy);
  Json rails = Json::array();
  for (const auto& r : c.rails()) rails.push_back(Json(r.name));
  root["rails"] = rails;
  root["start_unix"] = run.startUnix;
  root["completed"] = run.ops.size();
  root["check"] = anyWrong ? "failed" : "ok";
  Json list = Json::array(), splits = Json::array(), replayed = Json::array();
  for (const OpRecord& o : run.ops) {
    list.push_back(Json::array({o.endUnix, o.durationUs}));
    Json sp = Json::array();
    for (const auto& r : c.rails()) {
      auto it = o.split.find(r.name);
      sp.push_back(it == o.split.end() ? 0.0 : it->second);
    }
    splits.push_back(sp);
    replayed.push_back(o.replayed);
  }
  root["ops"] = list;
  root["op_split"] = splits;  // per op: share of each rail, in "rails" order
  root["op_replayed"] = replayed;
  root["failovers"] = eventsJson(c.metrics().failovers);
  root["readmissions"] = eventsJson(c.metrics().readmissions);
  root["rejected_readmissions"] = eventsJson(c.metrics().rejectedReadmissions);
  root["drains"] = eventsJson(c.metrics().drains);
  root["wave_rounds"] = c.metrics().waveRounds;
  root["mid_op_readmissions"] = c.metrics().midOpReadmissions;
  Json states = Json::object();
  for (const auto& [name, m] : c.metrics().rails) states[name] = m.alive ? "up" : "failed";
  root["rail_states"] = states;
  if (run.error.empty()) {
    root["error"] = Json();
  } else {
    root["error"] = Json{{"t_unix", run.errorUnix}, {"message", run.error}};
  }
  return root;
}

}  // namespace

int runLoop(Communicator& c, const BenchArgs& a) {
  LoopRun run = loop(c, a);
  // Every rank learns whether any rank saw a wrong result (skipped when the job is broken).
  int64_t anyWrong = run.wrongOps;
  if (run.error.empty()) c.allreduce(&anyWrong, &anyWrong, 1, DataType::kInt64, ReduceOp::kMax);
  if (c.rank() == 0 && !a.trace.empty()) {
    std::ofstream f(a.trace);
    f << dumpJson(traceJson(c, run, anyWrong > 0), 2) << "\n";
    if (!f) {
      std::fprintf(stderr, "nezha-bench: cannot write %s\n", a.trace.c_str());
      return 3;
    }
  }
  if (!run.error.empty()) return 3;
  return anyWrong > 0 ? 1 : 0;
}

}  // namespace nezha::tools
