// Bad input and broken peers end in clear errors, never hangs: wrong token, unreachable
// rendezvous, rank out of range, ranks disagreeing on rails / world size / settings, missing
// interface, invalid arguments, and a peer vanishing mid-operation (RailError naming the rail).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "base/socket.h"
#include "test_util.h"

namespace nezha {
namespace {

using testing::jobOptions;
using testing::runRanks;

// Outcome of constructing a Communicator on one rank.
struct Outcome {
  std::string type;  // "ok", "config", "auth", "rail", "other"
  std::string message;
};

std::vector<Outcome> tryJoin(const std::vector<Options>& opts) {
  std::vector<Outcome> out(opts.size());
  runRanks(static_cast<int>(opts.size()), [&](int r) {
    try {
      Communicator c(opts[r]);
      out[r] = {"ok", ""};
    } catch (const ConfigError& e) {
      out[r] = {"config", e.what()};
    } catch (const AuthError& e) {
      out[r] = {"auth", e.what()};
    } catch (const RailError& e) {
      out[r] = {"rail", e.what()};
    } catch (const std::exception& e) {
      out[r] = {"other", e.what()};
    }
  });
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

auto shortTimeouts = [](Options& o) {
  o.rendezvousTimeout = std::chrono::milliseconds(1500);
  o.ioTimeout = std::chrono::milliseconds(3000);
};

TEST(BadInputTest, WrongTokenIsRefused) {
  auto opts = jobOptions(2, 1, shortTimeouts);
  opts[1].jobToken = std::string(64, '0');  // well-formed, but not this job's
  auto out = tryJoin(opts);
  EXPECT_EQ(out[1].type, "auth") << out[1].message;
  EXPECT_TRUE(contains(out[1].message, "NEZHA_JOB_TOKEN")) << out[1].message;
  // Rank 0 never lets the impostor in and reports who is missing.
  EXPECT_EQ(out[0].type, "config") << out[0].message;
  EXPECT_TRUE(contains(out[0].message, "only 1 of 2 ranks joined")) << out[0].message;
  EXPECT_TRUE(contains(out[0].message, "missing ranks: 1")) << out[0].message;
}

TEST(BadInputTest, RendezvousUnreachableTimesOut) {
  // A port nobody listens on: bind, read the port, close.
  int port;
  {
    Fd probe = listenOn("127.0.0.1", 0, "");
    port = localPort(probe.get());
  }
  Options o;
  o.rank = 1;
  o.worldSize = 2;
  o.rails = testing::loopbackRails(1);
  o.jobToken = nezha::testing::kTestToken;
  o.rendezvousHost = "127.0.0.1";
  o.rendezvousPort = port;
  o.rendezvousTimeout = std::chrono::milliseconds(500);
  try {
    Communicator c(o);
    FAIL() << "joined a job without a rendezvous server";
  } catch (const RailError& e) {
    EXPECT_TRUE(contains(e.what(), "cannot connect to 127.0.0.1:" + std::to_string(port)))
        << e.what();
    EXPECT_EQ(e.rail(), -1);
  }
}

TEST(BadInputTest, RendezvousHostThatDoesNotResolve) {
  Options o;
  o.rank = 1;
  o.worldSize = 2;
  o.rails = testing::loopbackRails(1);
  o.jobToken = nezha::testing::kTestToken;
  o.rendezvousHost = "nzr-no-such-host.invalid";
  o.rendezvousPort = 29500;
  o.rendezvousTimeout = std::chrono::milliseconds(300);
  try {
    Communicator c(o);
    FAIL();
  } catch (const RailError& e) {
    EXPECT_TRUE(contains(e.what(), "cannot resolve \"nzr-no-such-host.invalid\"")) << e.what();
  }
}

TEST(BadInputTest, RankOutOfRange) {
  Options o;
  o.rank = 3;
  o.worldSize = 3;
  o.rails = testing::loopbackRails(1);
  o.jobToken = nezha::testing::kTestToken;
  try {
    Communicator c(o);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 3 is out of range for world size 3")) << e.what();
  }
}

TEST(BadInputTest, RanksDisagreeOnRails) {
  auto opts = jobOptions(3, 2, shortTimeouts);
  opts[2].rails.pop_back();
  auto out = tryJoin(opts);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r].type, "config") << "rank " << r << ": " << out[r].message;
    EXPECT_TRUE(
        contains(out[r].message, "rank 2 has rails [r0:tcp] but rank 0 has [r0:tcp,r1:tcp]"))
        << out[r].message;
  }
}

TEST(BadInputTest, RanksDisagreeOnWorldSize) {
  auto opts = jobOptions(2, 1, shortTimeouts);
  opts[1].worldSize = 3;
  auto out = tryJoin(opts);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].type, "config") << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "rank 1 has world size 3 but rank 0 has 2"))
        << out[r].message;
  }
}

TEST(BadInputTest, RanksDisagreeOnSettings) {
  auto opts = jobOptions(2, 1, shortTimeouts);
  opts[1].policy = Policy::kStatic;
  auto out = tryJoin(opts);
  EXPECT_EQ(out[1].type, "config");
  EXPECT_TRUE(contains(out[1].message, "policy=static")) << out[1].message;
}

TEST(BadInputTest, MissingInterface) {
  Options o;
  o.rails = {{"r0", "nzr-nosuch", "tcp", ""}};
  try {
    Communicator c(o);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "rail r0: interface \"nzr-nosuch\" does not exist")) << e.what();
  }
}

TEST(BadInputTest, InvalidArguments) {
  auto comms = testing::makeJob(jobOptions(2, 1));
  runRanks(2, [&](int r) {
    EXPECT_THROW(comms[r]->broadcast(nullptr, 4, DataType::kInt32, 0), InvalidArgument);
    int32_t x = 0;
    EXPECT_THROW(comms[r]->broadcast(&x, 1, DataType::kInt32, 2), InvalidArgument);
    EXPECT_THROW(comms[r]->allreduce(nullptr, &x, 1, DataType::kInt32, ReduceOp::kSum),
                 InvalidArgument);
    // The communicator is still usable after rejected calls.
    comms[r]->allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum);
  });
}

TEST(BadInputTest, PeerVanishingMidJobRaisesRailError) {
  auto comms = testing::makeJob(jobOptions(2, 2, shortTimeouts));
  comms[1].reset();  // closes every connection of rank 1
  std::vector<float> buf(1 << 16, 1.0f);
  try {
    comms[0]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    FAIL() << "allreduce succeeded without its peer";
  } catch (const RailError& e) {
    // Every rail lost its peer: the operation cannot finish anywhere (rail -1 = all rails).
    EXPECT_EQ(e.rail(), -1);
    EXPECT_TRUE(contains(e.what(), "no rail left")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
  }
}

// Ranks calling different operations are caught at the next agreement round with a clear error.
// Here rank 1 uses another reduce op in operation 1 (same size, so the operation itself still
// completes, with a meaningless result); the agreement before operation 3 reports it. A size
// mismatch is reported the same way when the mismatched operation does not time out first.
TEST(BadInputTest, RanksDisagreeOnCollectiveSizes) {
  auto comms = testing::makeJob(jobOptions(2, 2, [](Options& o) {
    shortTimeouts(o);
    o.coldThreshold = 0;  // hot ops, so agreement rounds happen
    o.minSliceBytes = 0;
    o.tuneInterval = 3;
  }));
  std::vector<std::string> errors(2);
  runRanks(2, [&](int r) {
    std::vector<float> buf(4096);
    try {
      for (int i = 0; i < 6; ++i) {
        ReduceOp op = (i == 1 && r == 1) ? ReduceOp::kMax : ReduceOp::kSum;
        comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, op);
      }
    } catch (const ConfigError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(
        errors[r].find("ranks called different collectives or sizes between operations 0 and 2"),
        std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

// Fault injection with NEZHA_FAILOVER=stop: rank 1 drops rail r1 while both ranks run split
// allreduces. Rank 1 gets a RailError for rail 1 at once and breaks all its rails; rank 0 gets a
// RailError too (for rail 1, or for rail 0 when its half of the interrupted op had already
// completed), never a hang. (The default, replay, is covered by failover_test.cc.)
TEST(BadInputTest, FailStopModeRailDroppedMidAllreduceFailsWithThatRail) {
  auto comms = testing::makeJob(jobOptions(2, 2, [](Options& o) {
    shortTimeouts(o);
    o.failover = false;
    o.coldThreshold = 0;
    o.minSliceBytes = 0;
    o.probeBytes = 0;  // equal split: both rails carry half
  }));
  std::vector<int> failedRail(2, -2);
  std::atomic<int> opsDone{0};
  std::thread injector([&] {
    while (opsDone.load() < 2) std::this_thread::yield();
    comms[1]->abortRail(1);
  });
  runRanks(2, [&](int r) {
    std::vector<float> buf(1 << 20, 1.0f);
    try {
      for (int i = 0; i < 1000; ++i) {
        comms[r]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        if (r == 1) opsDone++;
      }
    } catch (const RailError& e) {
      failedRail[r] = e.rail();
    }
  });
  injector.join();
  EXPECT_EQ(failedRail[1], 1);
  EXPECT_GE(failedRail[0], 0) << "rank 0 must fail with a RailError";
  // Fail-stop: no later operation runs on a communicator that lost a rail (it could read bytes
  // of the interrupted operation as its own).
  runRanks(2, [&](int r) {
    int64_t x = r + 1;
    try {
      comms[r]->allreduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum);
      ADD_FAILURE() << "rank " << r << " ran an operation after a rail failure";
    } catch (const RailError& e) {
      EXPECT_TRUE(contains(e.what(), "unusable after an earlier rail failure")) << e.what();
    }
  });
}

}  // namespace
}  // namespace nezha
