// The RDMA rail (transport/verbs) against the libibverbs test double (tests/doubles/ibverbs),
// in process on loopback: ranks are threads, the double's fake HCA sits on `lo` with RoCE v2
// GIDs for 127.0.0.1 and 127.0.0.2, described by a fixture sysfs tree the runtime's discovery
// and the double both read (NEZHA_RDMA_SYSFS_ROOT). ctest puts the double on LD_LIBRARY_PATH;
// the first test proves it is the double that got loaded. What every transport must do
// (ordering, element boundaries, deadlines, late peers, abort, progress reporting) is tested for
// this rail too by contract_test.cc; here is what is the RDMA rail's own (staging-slot sizes, a
// vanishing queue pair, port events, discovery).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>

#include "base/error.h"
#include "test_util.h"
#include "transport/fake_hca.h"
#include "transport/rdma_ranks.h"
#include "transport/transport.h"
#include "transport/verbs_pair.h"

namespace nezha {
namespace {

using testing::kTestToken;
using testing::runRanks;
using testing::writeFile;

// One fake HCA `nzdbl_lo` behind lo: GID i = 127.0.0.(i+1), RoCE v2.
class VerbsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { hca_ = std::make_unique<testing::FakeHcaOnLoopback>(); }
  static void TearDownTestSuite() { hca_.reset(); }

  static Options options(int rank, int ranks) { return testing::rdmaRankOptions(rank, ranks); }
  static std::vector<std::unique_ptr<Transport>> connectRanks(int ranks) {
    return testing::connectRdmaRanks(ranks);
  }

  static std::unique_ptr<testing::FakeHcaOnLoopback> hca_;
};
std::unique_ptr<testing::FakeHcaOnLoopback> VerbsTest::hca_;

uint8_t pattern(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i); }

// libnezha does not link libibverbs; the transport dlopens libibverbs.so.1, which must be the
// double here.
TEST_F(VerbsTest, TheDoubleIsLoaded) {
  const std::string path = testing::loadedLibibverbs();
  EXPECT_NE(path.find("doubles/ibverbs/"), std::string::npos) << path;
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto list = reinterpret_cast<decltype(&::ibv_get_device_list)>(
      dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"));
  auto name = reinterpret_cast<decltype(&::ibv_get_device_name)>(
      dlvsym(h, "ibv_get_device_name", "IBVERBS_1.1"));
  auto freeList = reinterpret_cast<decltype(&::ibv_free_device_list)>(
      dlvsym(h, "ibv_free_device_list", "IBVERBS_1.1"));
  int n = 0;
  ibv_device** devs = list(&n);
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(name(devs[0]), "nzdbl_lo");
  freeList(devs);
}

TEST_F(VerbsTest, ExchangesManySizesBetweenThreeRanks) {
  const int ranks = 3;
  auto ts = connectRanks(ranks);
  // Below, at and around one staging slot, several slots, more than a whole ring.
  const size_t sizes[] = {
      1, 7, 4096, (128 << 10) - 1, 128 << 10, (128 << 10) + 1, (1 << 20) + 3, 5 << 20};
  runRanks(ranks, [&](int r) {
    for (size_t len : sizes) {
      std::vector<std::vector<uint8_t>> out(ranks), in(ranks);
      std::vector<IoOp> ops;
      for (int p = 0; p < ranks; ++p) {
        if (p == r) continue;
        out[p].resize(len);
        in[p].assign(len, 0);
        for (size_t i = 0; i < len; ++i) out[p][i] = pattern(r, p, i);
      }
      // Two ops per peer and direction in one exchange: halves, completed in posting order.
      for (int p = 0; p < ranks; ++p) {
        if (p == r) continue;
        const size_t half = len / 2;
        ops.push_back(IoOp::send(p, out[p].data(), half));
        ops.push_back(IoOp::recv(p, in[p].data(), half));
        ops.push_back(IoOp::send(p, out[p].data() + half, len - half));
        ops.push_back(IoOp::recv(p, in[p].data() + half, len - half));
      }
      ts[r]->exchange(ops);
      for (int p = 0; p < ranks; ++p) {
        if (p == r) continue;
        for (size_t i = 0; i < len; ++i) {
          ASSERT_EQ(in[p][i], pattern(p, r, i)) << "len " << len << " from " << p << " at " << i;
        }
      }
    }
  });
}

// A peer's queue pair going away mid-transfer: outstanding work completes with errors, the
// exchange throws RailError naming the peer, no hang.
TEST_F(VerbsTest, PeerVanishingFailsTheRail) {
  auto ts = connectRanks(2);
  std::vector<uint8_t> buf(8 << 20);
  std::promise<void> sending;
  bool signalled = false;
  ts[0]->setProgressWatch([&](Clock::time_point) {
    if (!signalled) sending.set_value();
    signalled = true;
    return std::string();
  });
  std::thread killer([&] {
    sending.get_future().wait();  // rank 0 waits for credits rank 1 will never return
    ts[1].reset();
  });
  std::vector<IoOp> ops = {IoOp::send(1, buf.data(), buf.size())};
  EXPECT_THROW(ts[0]->exchange(ops), RailError);
  killer.join();
}

// The whole runtime on rdma rails: collectives exact on one rdma + one tcp rail, and on two
// rdma rails (the double's HCA has a GID per loopback address).
void allreduceExact(const std::vector<std::string>& transports) {
  const int ranks = 3;
  auto opts = testing::jobOptions(ranks, static_cast<int>(transports.size()), [&](Options& o) {
    for (size_t i = 0; i < transports.size(); ++i) o.rails[i].transport = transports[i];
    o.coldThreshold = 0;  // every op split across the rails
    o.minSliceBytes = 0;
  });
  auto comms = testing::makeJob(opts);
  runRanks(ranks, [&](int r) {
    for (size_t count : {size_t(1), size_t(1000), size_t(300000), size_t(2) << 20}) {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>((r + 1) * (i % 1000));
      comms[r]->allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], static_cast<int32_t>(6 * (i % 1000))) << "count " << count << " at " << i;
      }
    }
  });
}

TEST_F(VerbsTest, CollectivesExactOnOneRdmaAndOneTcpRail) { allreduceExact({"rdma", "tcp"}); }
TEST_F(VerbsTest, CollectivesExactOnTwoRdmaRails) { allreduceExact({"rdma", "rdma"}); }

// Two threads meeting; false if the other did not come within a minute (it failed).
class Meeting {
 public:
  bool arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = gen_;
    if (++count_ == 2) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0, gen_ = 0;
};

// A rail's link going down: the double's HCA raises IBV_EVENT_PORT_ERR, the channel's async
// thread hands it to the health listener, and the next exchange fails. Each rank is a thread
// in a network namespace of its own (a thread's namespace is inherited by the threads and
// processes it starts), joined by a veth pair, so the host's links are never touched. Root only.
TEST_F(VerbsTest, PortErrorReachesTheHealthListener) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces";
  char tmpl[] = "/tmp/nezha-verbs-veth.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  for (int i = 0; i < 2; ++i) {  // one fake HCA per interface
    const std::string ifc = "nzv" + std::to_string(i), dev = "nzdbl_" + ifc;
    const std::string port = root + "/class/infiniband/" + dev + "/ports/1";
    writeFile(root + "/class/net/" + ifc + "/device/infiniband/" + dev + "/ibdev", dev);
    writeFile(port + "/link_layer", "Ethernet");
    writeFile(port + "/gids/0", ipv4MappedGid("10.77.0." + std::to_string(i + 1)));
    writeFile(port + "/gid_attrs/ndevs/0", ifc);
    writeFile(port + "/gid_attrs/types/0", "RoCE v2");
  }
  setenv("NEZHA_RDMA_SYSFS_ROOT", root.c_str(), 1);
  std::promise<pid_t> tids[2];
  std::promise<void> vethReady;
  std::shared_future<void> veth = vethReady.get_future().share();
  Meeting meet;
  RailEndpoint endpoints[2];
  std::promise<std::string> event;
  std::string eventText;
  bool threw = false;
  auto rank = [&](int r) {
    if (unshare(CLONE_NEWNET) != 0) {
      tids[r].set_value(-1);
      return;
    }
    tids[r].set_value(static_cast<pid_t>(gettid()));
    veth.wait();
    const std::string ifc = "nzv" + std::to_string(r), ip = "10.77.0." + std::to_string(r + 1);
    if (std::system(("ip addr add " + ip + "/24 dev " + ifc + " && ip link set " + ifc +
                     " up && ip link set lo up")
                        .c_str()) != 0) {
      ADD_FAILURE() << "cannot configure " << ifc;
      meet.arrive();
      return;
    }
    Options o = options(r, 2);
    o.rails[0].iface = ifc;
    std::unique_ptr<Transport> t;
    try {
      t = makeTransport(o, 0, ip);
      endpoints[r] = t->endpoint();
      if (r == 0) {
        t->setHealthListener([&, reported = false](const std::string& why) mutable {
          if (!reported) event.set_value(why);
          reported = true;
        });
      }
      if (!meet.arrive()) return;
      JobTable job;
      job.session = "verbs-port";
      for (int k = 0; k < 2; ++k) job.ranks.push_back(RankInfo{k, 2, "", {endpoints[k]}});
      t->connect(job, Clock::now() + std::chrono::seconds(20));
      std::vector<uint8_t> a(1 << 20, static_cast<uint8_t>(r + 1)), b(1 << 20, 0);
      std::vector<IoOp> ops = {IoOp::send(1 - r, a.data(), a.size()),
                               IoOp::recv(1 - r, b.data(), b.size())};
      t->exchange(ops);
      EXPECT_EQ(b, std::vector<uint8_t>(1 << 20, static_cast<uint8_t>(2 - r)));
      // Both exchanges done before the link goes: rank 0's can finish while rank 1 still waits
      // for its last completion, which a dead port would fail (seen under ctest -j2).
      meet.arrive();
      if (r == 0) {
        EXPECT_EQ(std::system("ip link set nzv0 down"), 0);
        auto got = event.get_future();
        // A bound on a hang, not a timing assertion: the event follows the link change.
        if (got.wait_for(std::chrono::seconds(30)) == std::future_status::ready) {
          eventText = got.get();
        }
        std::vector<IoOp> more = {IoOp::recv(1, b.data(), b.size())};
        try {
          t->exchange(more);
        } catch (const RailError&) {
          threw = true;
        }
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
    meet.arrive();  // rank 1 stays until rank 0 is done
  };
  std::thread t0(rank, 0), t1(rank, 1);
  const pid_t tid0 = tids[0].get_future().get(), tid1 = tids[1].get_future().get();
  EXPECT_GT(tid0, 0);
  EXPECT_GT(tid1, 0);
  EXPECT_EQ(
      std::system(("ip link add nzv0 type veth peer name nzv1 && ip link set nzv0 netns " +
                   std::to_string(tid0) + " && ip link set nzv1 netns " + std::to_string(tid1))
                      .c_str()),
      0);
  vethReady.set_value();
  t0.join();
  t1.join();
  EXPECT_EQ(eventText, "nzdbl_nzv0 port 1: IBV_EVENT_PORT_ERR");
  EXPECT_TRUE(threw) << "the exchange after the port error should throw RailError";
  setenv("NEZHA_RDMA_SYSFS_ROOT", hca_->root().c_str(), 1);
  EXPECT_EQ(std::system(("rm -rf '" + root + "'").c_str()), 0);
}

TEST_F(VerbsTest, NoDeviceBehindTheInterfaceIsAConfigError) {
  Options o = options(0, 1);
  o.rails[0].iface = "nzno0";
  EXPECT_THROW(makeTransport(o, 0, "127.0.0.1"), ConfigError);
}

}  // namespace
}  // namespace nezha
