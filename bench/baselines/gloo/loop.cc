#include "loop.h"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include "bench_report.h"

namespace gloobench {
namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Op {
  double endUnix;
  double us;
};

std::string RenderTrace(const BenchOptions& opts, uint64_t bytes, double startUnix,
                        const std::vector<Op>& ops, double errorUnix, const std::string& error) {
  std::ostringstream j;
  j << std::fixed << std::setprecision(6);
  j << "{\"tool\":\"gloo-bench\",\"mode\":\"loop\",\"op\":\"allreduce\",\"dtype\":\""
    << DTypeName(opts.dtype) << "\",\"world_size\":" << opts.worldSize << ",\"rank\":" << opts.rank
    << ",\"bytes\":" << bytes << ",\"timeout_ms\":" << opts.timeoutMs << ",\"rails\":[{\"name\":\""
    << opts.railName << "\",\"iface\":\"" << opts.iface << "\",\"transport\":\"tcp\"}]"
    << ",\"start_unix\":" << startUnix << ",\"completed\":" << ops.size() << ",\"ops\":[";
  for (size_t i = 0; i < ops.size(); i++) {
    if (i > 0) j << ",";
    j << "[" << ops[i].endUnix << "," << std::setprecision(1) << ops[i].us << std::setprecision(6)
      << "]";
  }
  j << "],\"error\":";
  if (error.empty()) {
    j << "null";
  } else {
    std::string msg;
    for (char c : error) msg += (c == '"' || c == '\\') ? '\'' : (c < 0x20 ? ' ' : c);
    j << "{\"t_unix\":" << errorUnix << ",\"message\":\"" << msg << "\"}";
  }
  j << "}\n";
  return j.str();
}

}  // namespace

int RunLoop(const std::shared_ptr<gloo::Context>& context, const BenchOptions& opts) {
  const uint64_t bytes = opts.maxBytes / sizeof(float) * sizeof(float);
  const size_t count = bytes / sizeof(float);
  // One extra element carries each rank's "my time is up" vote; its sum tells every rank the
  // same answer after the same op, so all ranks stop together (a rank leaving on its own clock
  // would make the others fail with "connection closed").
  std::vector<float> in(count + 1, static_cast<float>(opts.rank + 1));
  std::vector<float> out(count + 1);
  std::vector<Op> ops;
  std::string error;
  double errorUnix = 0;
  const double startUnix = UnixSeconds();
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(opts.loopSeconds);
  uint32_t tag = 0;
  try {
    for (bool stop = false; !stop;) {
      const auto t0 = std::chrono::steady_clock::now();
      in[count] = t0 >= end ? 1.0f : 0.0f;
      gloo::AllreduceOptions o(context);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setInput(in.data(), count + 1);
      o.setOutput(out.data(), count + 1);
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTag(tag++);
      o.setTimeout(std::chrono::milliseconds(opts.timeoutMs));
      gloo::allreduce(o);
      const auto t1 = std::chrono::steady_clock::now();
      ops.push_back({UnixSeconds(), std::chrono::duration<double, std::micro>(t1 - t0).count()});
      stop = out[count] > 0.0f;
    }
  } catch (const gloo::Exception& e) {
    errorUnix = UnixSeconds();
    error = e.what();
    std::cerr << "gloo-bench: rank " << opts.rank << ": op " << ops.size() << " failed after "
              << std::fixed << std::setprecision(1) << (errorUnix - startUnix) << " s: " << error
              << "\n";
  }
  if (opts.rank == 0) {
    WriteJsonFile(opts.tracePath, RenderTrace(opts, bytes, startUnix, ops, errorUnix, error));
  }
  if (!opts.quiet && opts.rank == 0) {
    std::cout << "# loop: " << ops.size() << " allreduces of " << bytes << " bytes in "
              << opts.loopSeconds << " s" << (error.empty() ? "" : ", then failed") << "\n";
  }
  return error.empty() ? 0 : 1;
}

}  // namespace gloobench
