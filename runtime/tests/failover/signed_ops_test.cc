// Signed operations (Communicator::signNextOp, failover/signed_channel.h): the signature rides
// in each slice's first exchange, ahead of the data. Ranks that sign alike get exact results,
// small (round-free, one rail) and large (split over both rails) alike; ranks that disagree,
// whether the bytes would have moved (a different signature over equal sizes), could not have
// (different sizes), or ran different collectives, all get MismatchError naming every rank's
// signature, and the communicator refuses what comes after.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::runRanks;

auto twoRails = [](Options& o) {
  o.coldThreshold = size_t(64) << 10;  // 1 MiB operations split over both rails
  o.ioTimeout = std::chrono::milliseconds(10000);
  o.progressFloor = std::chrono::milliseconds(2000);
  o.readmitHoldDown = std::chrono::milliseconds(0);
};

void sign(Communicator& c, const std::string& what) { c.signNextOp(what.data(), what.size()); }

// What every rank got from one operation: its error, or "" and its wrong elements.
struct Result {
  std::string error;  // "MismatchError: ...", "RailError: ...", or ""
  std::vector<std::string> signatures;
  long wrong = 0;
};

template <class Fn>
Result attempt(Fn fn) {
  Result res;
  try {
    res.wrong = fn();
  } catch (const MismatchError& e) {
    res.error = std::string("MismatchError: ") + e.what();
    res.signatures = e.signatures();
  } catch (const Error& e) {
    res.error = std::string("other: ") + e.what();
  }
  return res;
}

long sumAllreduce(Communicator& c, int n, size_t count) {
  std::vector<float> buf(count, 1.0f);
  c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  long wrong = 0;
  for (float v : buf) wrong += v != static_cast<float>(n);
  return wrong;
}

TEST(SignedOpsTest, RanksThatSignAlikeGetExactResults) {
  const int n = 3;
  auto comms = testing::makeJob(jobOptions(n, 2, twoRails));
  std::vector<long> wrong(n, 0);
  runRanks(n, [&](int r) {
    Communicator& c = *comms[r];
    for (int i = 0; i < 40; ++i) {
      sign(c, "allreduce #" + std::to_string(i));
      wrong[r] += sumAllreduce(c, n, i % 10 == 9 ? (size_t(1) << 18) : 256 + i);  // 1 MiB or small
    }
    sign(c, "barrier");
    c.barrier();
    std::vector<int32_t> mine(64, r), all(64 * n, -1);
    sign(c, "allgather");
    c.allgather(mine.data(), all.data(), 64, DataType::kInt32);
    for (int p = 0; p < n; ++p) wrong[r] += all[p * 64] != p || all[p * 64 + 63] != p;
    std::vector<int32_t> b(100, r == 2 ? 7 : 0);
    sign(c, "broadcast root 2");
    c.broadcast(b.data(), b.size(), DataType::kInt32, 2);
    for (int32_t v : b) wrong[r] += v != 7;
    sumAllreduce(c, n, 16);  // unsigned on every rank: no header anywhere
  });
  EXPECT_EQ(wrong, std::vector<long>(n, 0));
  for (auto& c : comms) {
    EXPECT_GT(c->metrics().roundFreeOps, 0u);  // the small ones still skip their round
    EXPECT_TRUE(c->metrics().failovers.empty());
  }
}

// Runs `op(rank)` on every rank of a fresh job and returns what each got; then checks that the
// communicator refuses the next operation on every rank.
std::vector<Result> mismatchJob(int n, const std::function<long(Communicator&, int)>& op,
                                bool hot = false) {
  auto comms = testing::makeJob(jobOptions(n, 2, [hot](Options& o) {
    twoRails(o);
    if (!hot) o.coldThreshold = size_t(16) << 20;
  }));
  std::vector<Result> got(n);
  runRanks(n, [&](int r) {
    Communicator& c = *comms[r];
    sign(c, "warm-up");
    sumAllreduce(c, n, 8);
    got[r] = attempt([&] { return op(c, r); });
    EXPECT_THROW(sumAllreduce(c, n, 8), Error) << "rank " << r << ": usable after a mismatch";
  });
  return got;
}

void expectEveryRankNames(const std::vector<Result>& got, const std::string& odd) {
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(got[r].error.rfind("MismatchError: ", 0), 0u) << "rank " << r << ": " << got[r].error;
    EXPECT_NE(got[r].error.find(odd), std::string::npos) << "rank " << r << ": " << got[r].error;
    ASSERT_EQ(got[r].signatures.size(), got.size()) << "rank " << r;
  }
}

TEST(SignedOpsTest, EqualSizesWithAnotherSignatureFailOnEveryRank) {
  // Three ranks, rank 1 alone different: rank 0, whose ring predecessor (rank 2) signed as it
  // did, must fail too, not finish with a sum of floats and integers.
  const auto got = mismatchJob(3, [](Communicator& c, int r) {
    sign(c, r == 1 ? "allreduce Int[16] SUM" : "allreduce Float[16] SUM");
    return sumAllreduce(c, 3, 16);
  });
  // 616c6c... = "all": the signature bytes, ranks grouped.
  expectEveryRankNames(got, "rank 1 sent operation 1, signature " +
                                std::string("616c6c726564756365") /* "allreduce" */);
  for (const Result& g : got) {
    EXPECT_NE(g.error.find("ranks 0,2 sent operation 1"), std::string::npos) << g.error;
    EXPECT_EQ(g.signatures[1].rfind("allreduce Int", 0), 0u);
    EXPECT_EQ(g.signatures[0].rfind("allreduce Float", 0), 0u);
  }
}

TEST(SignedOpsTest, DifferentSizesFailAsAMismatchNotARail) {
  const auto got = mismatchJob(2, [](Communicator& c, int r) {
    sign(c, r == 0 ? "count 10" : "count 20");
    return sumAllreduce(c, 2, r == 0 ? 10 : 20);
  });
  expectEveryRankNames(got, "rank 1 sent operation 1, signature 636f756e74203230");
}

TEST(SignedOpsTest, DifferentCollectivesFailOnEveryRank) {
  const auto got = mismatchJob(2, [](Communicator& c, int r) -> long {
    std::vector<float> buf(16, 1.0f);
    if (r == 0) {
      sign(c, "allreduce");
      c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    } else {
      sign(c, "broadcast");
      c.broadcast(buf.data(), buf.size(), DataType::kFloat32, 0);
    }
    return 0;
  });
  expectEveryRankNames(got, "rank 1 sent operation 1");
}

TEST(SignedOpsTest, LargeOperationsSplitOverRailsFailOnEveryRank) {
  const auto got = mismatchJob(
      2,
      [](Communicator& c, int r) {
        sign(c, r == 0 ? "big" : "bigger");
        return sumAllreduce(c, 2, r == 0 ? (size_t(1) << 18) : (size_t(1) << 19));
      },
      true);
  expectEveryRankNames(got, "rank 0 sent operation 1, signature 626967;");
}

TEST(SignedOpsTest, SignaturesLongerThanTheHeaderAreRefused) {
  auto comms = testing::makeJob(jobOptions(1, 1, twoRails));
  const std::string tooLong(33, 'x');
  EXPECT_THROW(comms[0]->signNextOp(tooLong.data(), tooLong.size()), InvalidArgument);
  EXPECT_THROW(comms[0]->signNextOp(nullptr, 4), InvalidArgument);
}

}  // namespace
}  // namespace nezha
