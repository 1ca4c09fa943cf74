// Ranks of a job as threads of one process, each with the rdma rail r0 on the test double's
// loopback HCA (fake_hca.h, GID 127.0.0.1), connected to each other as a job connects them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "transport/transport.h"

namespace nezha::testing {

// Rank `rank` of `ranks` with the rail r0 = lo:rdma on 127.0.0.1.
inline Options rdmaRankOptions(int rank, int ranks) {
  Options o;
  o.rank = rank;
  o.worldSize = ranks;
  o.rails = {{"r0", "lo", "rdma", "127.0.0.1"}};
  o.jobToken = kTestToken;
  o.ioTimeout = std::chrono::milliseconds(20000);
  return o;
}

// Connected rdma channels, one per rank; rank r's opens on domains[r] when given (null or
// absent: a domain of its own). The control connections are released (and closed).
inline std::vector<std::unique_ptr<Transport>> connectRdmaRanks(
    int ranks, const std::vector<std::shared_ptr<const VerbsDevice>>& domains = {}) {
  std::vector<std::unique_ptr<Transport>> ts;
  JobTable job;
  job.session = "verbs-test";
  for (int r = 0; r < ranks; ++r) {
    ts.push_back(makeTransport(rdmaRankOptions(r, ranks), 0, "127.0.0.1",
                               r < static_cast<int>(domains.size()) ? domains[r] : nullptr));
    RankInfo info;
    info.rank = r;
    info.worldSize = ranks;
    info.rails = {ts.back()->endpoint()};
    job.ranks.push_back(info);
  }
  runRanks(ranks, [&](int r) {
    ts[r]->connect(job, Clock::now() + std::chrono::seconds(20));
    EXPECT_EQ(ts[r]->releaseControl().size(), static_cast<size_t>(ranks));
  });
  return ts;
}

}  // namespace nezha::testing
