#include "bench_loop.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "util/json.h"

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

}  // namespace

int runLoop(Communicator& c, const BenchArgs& a) {
  const int rank = c.rank(), world = c.worldSize();
  const size_t count = std::max<size_t>(2, a.maxBytes / 4);
  // Element 0 carries the stop flag (rank 0 sets 1 once its time is up), so every rank stops
  // after the same operation without a separate round. The other elements are rank+1 and must
  // sum to exactly world(world+1)/2 in every operation (float32 is exact for these integers).
  std::vector<float> in(count, static_cast<float>(rank + 1)), out(count);
  const float want = static_cast<float>(world * (world + 1) / 2);
  const double start = unixNow();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<OpRecord> ops;
  std::string error;
  double errorUnix = 0;
  long wrongOps = 0;
  for (;;) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    in[0] = rank == 0 && elapsed >= a.loopSeconds ? 1.0f : 0.0f;
    const auto s = std::chrono::steady_clock::now();
    try {
      c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
      errorUnix = unixNow();
      std::fprintf(stderr, "nezha-bench: rank %d: %s\n", rank, e.what());
      break;
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count();
    size_t bad = 0;
    for (size_t j = 1; j < count; ++j) bad += out[j] != want;
    if (bad > 0) {
      ++wrongOps;
      std::fprintf(stderr, "nezha-bench: rank %d: op %zu has %zu wrong elements\n", rank,
                   ops.size(), bad);
    }
    ops.push_back(OpRecord{unixNow(), us, c.lastReport().split, c.lastReport().replayed});
    if (out[0] != 0.0f) break;
  }
  // Every rank learns whether any rank saw a wrong result (skipped when the job is broken).
  int64_t anyWrong = wrongOps;
  if (error.empty()) c.allreduce(&anyWrong, &anyWrong, 1, DataType::kInt64, ReduceOp::kMax);

  if (rank == 0 && !a.trace.empty()) {
    Json root = Json::object();
    root["tool"] = "nezha-bench";
    root["mode"] = "loop";
    root["bytes"] = count * 4;
    root["world_size"] = world;
    root["policy"] = toString(c.options().policy);
    Json rails = Json::array();
    for (const auto& r : c.rails()) rails.push_back(Json(r.name));
    root["rails"] = rails;
    root["start_unix"] = start;
    root["completed"] = ops.size();
    root["check"] = anyWrong > 0 ? "failed" : "ok";
    // ops stays [end_unix, duration_us] (the shared contract); per-op detail is parallel.
    Json list = Json::array(), splits = Json::array(), replayed = Json::array();
    for (const OpRecord& o : ops) {
      Json pair = Json::array();
      pair.push_back(Json(o.endUnix));
      pair.push_back(Json(o.durationUs));
      list.push_back(pair);
      Json sp = Json::array();
      for (const auto& r : c.rails()) {
        auto it = o.split.find(r.name);
        sp.push_back(Json(it == o.split.end() ? 0.0 : it->second));
      }
      splits.push_back(sp);
      replayed.push_back(Json(o.replayed));
    }
    root["ops"] = list;
    root["op_split"] = splits;  // per op: share of each rail, in "rails" order
    root["op_replayed"] = replayed;
    auto events = [](const std::vector<FailoverEvent>& evs) {
      Json arr = Json::array();
      for (const FailoverEvent& f : evs) {
        Json e = Json::object();
        e["op"] = f.op;
        e["rail"] = f.rail;
        e["t_unix"] = f.unixSeconds;
        e["stall_s"] = f.stallSeconds;
        e["local_error"] = f.localError;
        Json ranks = Json::array();
        for (int r : f.ranks) ranks.push_back(r);
        e["ranks"] = ranks;
        arr.push_back(e);
      }
      return arr;
    };
    root["failovers"] = events(c.metrics().failovers);
    root["readmissions"] = events(c.metrics().readmissions);
    Json states = Json::object();
    for (const auto& [name, m] : c.metrics().rails) states[name] = m.alive ? "up" : "failed";
    root["rail_states"] = states;
    if (error.empty()) {
      root["error"] = Json();
    } else {
      Json e = Json::object();
      e["t_unix"] = errorUnix;
      e["message"] = error;
      root["error"] = e;
    }
    std::ofstream f(a.trace);
    f << dumpJson(root, 2) << "\n";
    if (!f) {
      std::fprintf(stderr, "nezha-bench: cannot write %s\n", a.trace.c_str());
      return 3;
    }
  }
  if (!error.empty()) return 3;
  return anyWrong > 0 ? 1 : 0;
}

}  // namespace nezha::tools
