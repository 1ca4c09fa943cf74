// gloo-bench: Gloo's ring allreduce on one interface, the single-rail baseline Nezha is measured
// against (and, under `mptcpize run`, the MPTCP baseline); with several interfaces and --split,
// the same ring run by hand on every rail at once, each on its share of the buffer (the
// hand-split baseline). One process per rank.
#include <gloo/common/error.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_options.h"
#include "bench_report.h"
#include "loop.h"
#include "rail_contexts.h"
#include "sweep.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

int Run(const gloobench::BenchOptions& opts) {
  if (access(opts.storeDir.c_str(), W_OK) != 0) {
    std::cerr << "gloo-bench: --store-dir: '" << opts.storeDir << "' is not a writable directory\n";
    return kExitUsage;
  }
  std::vector<std::shared_ptr<gloo::Context>> rails;
  try {
    rails = gloobench::ConnectRails(opts);
  } catch (const gloobench::UsageError& e) {
    std::cerr << "gloo-bench: " << e.what() << "\n";
    return kExitUsage;
  }

  // ParseOptions allows the loop with one interface only.
  if (opts.loopSeconds > 0) return gloobench::RunLoop(rails.front(), opts);

  const bool printing = opts.rank == 0 && !opts.quiet;
  if (printing) gloobench::PrintTableHeader(std::cout, opts);
  auto results = gloobench::RunSweep(rails, opts, [&](const gloobench::SizeResult& r) {
    if (printing) gloobench::PrintTableRow(std::cout, r);
  });

  if (opts.rank == 0 && !opts.jsonPath.empty()) {
    gloobench::WriteJsonFile(opts.jsonPath, gloobench::RenderJson(opts, results));
  }
  for (const auto& r : results) {
    if (r.check == "failed") {
      std::cerr << "gloo-bench: rank " << opts.rank << ": --check failed at " << r.bytes
                << " bytes\n";
      return kExitFailure;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<gloobench::BenchOptions> opts;
  try {
    opts = gloobench::ParseOptions(std::vector<std::string>(argv + 1, argv + argc),
                                   gloobench::ProcessEnv());
  } catch (const gloobench::UsageError& e) {
    std::cerr << "gloo-bench: " << e.what() << "\n";
    return kExitUsage;
  }
  if (!opts) return 0;
  try {
    return Run(*opts);
  } catch (const gloo::Exception& e) {
    // A dead or cut link: Gloo reports it as a timeout or a closed connection.
    std::cerr << "gloo-bench: rank " << opts->rank << ": gloo: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "gloo-bench: rank " << opts->rank << ": " << e.what() << "\n";
  }
  return kExitFailure;
}
