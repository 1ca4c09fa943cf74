// The SHARP rail driven against the libsharp_coll test double the way hardware takes it: one
// rank, the device found as "mlx5_0:1" in a fixture sysfs tree (the double resolves it back to
// lo), and a scripted aggregation node in the test (tests/doubles/sharp/wire.h) that decides
// when, and whether, a contribution is answered. Covers what the library's real callers do
// (docs/sharp.md): defaults copied, NULL world ranks, the on-node rank, capabilities deciding
// which datatypes go to SHARP (said once), and a request the runtime gave up on living until
// its late completion, never freed or unregistered before.
#include "transport/sharp/sharp_channel.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "doubles/sharp/double_stats.h"
#include "doubles/sharp/wire.h"

namespace nezha {
namespace {

namespace fs = std::filesystem;
namespace wire = sharpdouble;

bool readAll(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool writeAll(int fd, const void* buf, size_t len) {
  return send(fd, buf, len, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

// The aggregation node of a one-member group: admits the member, then answers a contribution
// (with itself, the reduction over one member) only when the test says so.
class ScriptedAggregator {
 public:
  ScriptedAggregator() {
    listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(listen_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listen_, 1) != 0 ||
        getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw Error("scripted aggregator: cannot listen on loopback");
    }
    port_ = ntohs(a.sin_port);
    admit_ = std::thread([this] {
      conn_ = accept(listen_, nullptr, nullptr);
      wire::Hello hello{};
      if (conn_ < 0 || !readAll(conn_, &hello, sizeof(hello))) return;
      const wire::HelloReply ok{wire::kReplyMagic, 0};
      writeAll(conn_, &ok, sizeof(ok));
    });
  }
  ~ScriptedAggregator() {
    shutdown(listen_, SHUT_RDWR);  // an admission never made ends accept()
    if (admit_.joinable()) admit_.join();
    if (conn_ >= 0) close(conn_);
    close(listen_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The member joined (call after its connect() returned).
  void joined() {
    admit_.join();
    ASSERT_GE(conn_, 0);
  }
  bool contributionWaiting() const {
    pollfd p{conn_, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }
  // Reads one contribution and answers it with the result.
  void answer() {
    wire::OpHeader h{};
    ASSERT_TRUE(readAll(conn_, &h, sizeof(h)));
    ASSERT_EQ(h.magic, wire::kOpMagic);
    std::string payload(h.bytes, '\0');
    ASSERT_TRUE(readAll(conn_, payload.data(), payload.size()));
    // One write: on loopback the whole answer is then readable once send() returned (two
    // small writes would let Nagle hold the second back).
    const wire::OpReply reply{wire::kReplyMagic, 0, h.seq, h.bytes};
    std::string answer(reinterpret_cast<const char*>(&reply), sizeof(reply));
    answer += payload;
    ASSERT_TRUE(writeAll(conn_, answer.data(), answer.size()));
  }

 private:
  int listen_ = -1, conn_ = -1;
  int port_ = 0;
  std::thread admit_;
};

class SharpChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nezha-sharp-hca.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // lo is port 1 of IPoIB HCA mlx5_0 (dev_port is 0-based), as sysfs shows a real one.
    fs::create_directories(root_ / "class/net/lo/device/infiniband/mlx5_0");
    std::ofstream(root_ / "class/net/lo/dev_port") << "0\n";
    fs::create_directories(root_ / "class/infiniband/mlx5_0/ports/1/gids");
    std::ofstream(root_ / "class/infiniband/mlx5_0/ports/1/link_layer") << "InfiniBand\n";
    std::ofstream(root_ / "class/infiniband/mlx5_0/ports/1/gids/0")
        << "fe80:0000:0000:0000:0000:0000:0000:0001\n";
    setenv("NEZHA_RDMA_SYSFS_ROOT", root_.c_str(), 1);
    setenv("NEZHA_SHARP_DOUBLE_AGGREGATOR", agg_.address().c_str(), 1);
    unsetenv("NEZHA_SHARP_DOUBLE_GENERATION");
    // Held for the whole test: the counters outlive the channel's own handle.
    lib_ = dlopen(NEZHA_SHARP_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    statsFn_ = reinterpret_cast<wire::StatsFn>(dlsym(lib_, "nezha_sharp_double_stats"));
    auto reset = reinterpret_cast<wire::ResetFn>(dlsym(lib_, "nezha_sharp_double_reset"));
    ASSERT_NE(statsFn_, nullptr);
    ASSERT_NE(reset, nullptr);
    reset();
  }
  void TearDown() override {
    unsetenv("NEZHA_RDMA_SYSFS_ROOT");
    unsetenv("NEZHA_SHARP_DOUBLE_AGGREGATOR");
    unsetenv("NEZHA_SHARP_DOUBLE_GENERATION");
    if (lib_ != nullptr) dlclose(lib_);
    fs::remove_all(root_);
  }

  wire::Stats stats() const {
    wire::Stats s{};
    statsFn_(&s);
    return s;
  }

  static Options options() {
    Options o;
    o.rails = {{"ib0", "lo", "sharp", "127.0.0.1"}};
    o.worldSize = 1;
    o.rank = 0;
    o.localRank = 3;
    o.jobToken = std::string(64, 'a');
    o.ioTimeout = std::chrono::milliseconds(20000);
    o.sharpLibrary = NEZHA_SHARP_DOUBLE_PATH;
    return o;
  }

  // A connected one-rank SHARP rail whose group is `agg`'s.
  static std::unique_ptr<SharpChannel> connected(ScriptedAggregator& agg) {
    setenv("NEZHA_SHARP_DOUBLE_AGGREGATOR", agg.address().c_str(), 1);
    auto ch = std::make_unique<SharpChannel>(options(), 0, "127.0.0.1");
    JobTable job;
    job.session = "sharp-channel-test";
    job.ranks.push_back(RankInfo{0, 1, "", {ch->endpoint()}});
    ch->connect(job, std::chrono::steady_clock::now() + std::chrono::seconds(20));
    agg.joined();
    return ch;
  }

  fs::path root_;
  ScriptedAggregator agg_;
  void* lib_ = nullptr;
  wire::StatsFn statsFn_ = nullptr;
};

TEST_F(SharpChannelTest, StartsFromTheDefaultsWithTheHardwareDeviceForm) {
  auto ch = connected(agg_);
  const wire::Stats s = stats();
  EXPECT_STREQ(s.lastDevice, "mlx5_0:1");  // found in sysfs, not the interface name
  EXPECT_STREQ(s.lastInterface, "lo");
  void* defaults = dlsym(lib_, "sharp_coll_default_config");
  ASSERT_NE(defaults, nullptr);
  EXPECT_EQ(s.lastUserProgressNumPolls,
            static_cast<const sharp::sharp_coll_config*>(defaults)->user_progress_num_polls);
  EXPECT_EQ(s.lastCollTimeout, -1);  // the one default the runtime overrides
  EXPECT_EQ(s.lastWorldLocalRank, 3);
  EXPECT_EQ(s.lastGroupWorldRanksNull, 1);

  // And an allreduce through the aggregator completes with the group's result.
  std::thread node([&] { agg_.answer(); });
  const std::vector<float> in{1.5f, -2.0f, 3.25f};
  std::vector<float> out(in.size(), 0.0f);
  ch->allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
  node.join();
  EXPECT_EQ(out, in);
  EXPECT_EQ(stats().completions, 1u);
}

// The runtime gives up (its progress watch says so) while the contribution is at the
// aggregator; the answer comes afterwards. The request must not have been freed, nor its
// receive buffer unregistered: the late completion lands in memory the rail still owns.
TEST_F(SharpChannelTest, GivenUpRequestLivesUntilItsLateCompletion) {
  auto ch = connected(agg_);
  ch->setProgressWatch([this](std::chrono::steady_clock::time_point) {
    return agg_.contributionWaiting() ? std::string("the test gave up") : std::string();
  });
  const std::vector<double> in{1.0, 2.0};
  std::vector<double> out(in.size(), 0.0);
  EXPECT_THROW(ch->allreduce(in.data(), out.data(), in.size(), DataType::kFloat64, ReduceOp::kSum),
               RailError);
  EXPECT_EQ(stats().completions, 0u);
  agg_.answer();  // the late completion
  ch.reset();
  const wire::Stats s = stats();
  EXPECT_EQ(s.completions, 1u);
  EXPECT_EQ(s.unfinishedFrees, 0u);
  EXPECT_EQ(s.deregsInFlight, 0u);
  EXPECT_EQ(s.completionsIntoReleasedMemory, 0u);
}

TEST_F(SharpChannelTest, GivenUpRequestThatNeverCompletesEndsWithItsGroup) {
  auto ch = connected(agg_);
  ch->setProgressWatch([this](std::chrono::steady_clock::time_point) {
    return agg_.contributionWaiting() ? std::string("the test gave up") : std::string();
  });
  const std::vector<int32_t> in{7};
  std::vector<int32_t> out(1, 0);
  EXPECT_THROW(ch->allreduce(in.data(), out.data(), 1, DataType::kInt32, ReduceOp::kMax),
               RailError);
  ch.reset();  // black hole: no answer ever
  const wire::Stats s = stats();
  EXPECT_EQ(s.completions, 0u);
  EXPECT_EQ(s.unfinishedFrees, 0u);
  EXPECT_EQ(s.deregsInFlight, 0u);
}

// bfloat16 goes to SHARP only where the fabric's capabilities list it, the same answer on
// every connect; each distinct answer is logged once per process.
TEST_F(SharpChannelTest, CapabilitiesDecideWhatGoesToSharp) {
  setenv("NEZHA_SHARP_DOUBLE_GENERATION", "2", 1);
  testing::internal::CaptureStderr();
  auto ch = std::make_unique<SharpChannel>(options(), 0, "127.0.0.1");
  EXPECT_FALSE(ch->supports(DataType::kFloat32, ReduceOp::kSum));  // nothing before connect
  ch.reset();
  ch = connected(agg_);
  EXPECT_TRUE(ch->supports(DataType::kFloat32, ReduceOp::kSum));
  EXPECT_TRUE(ch->supports(DataType::kFloat16, ReduceOp::kMax));
  EXPECT_FALSE(ch->supports(DataType::kBFloat16, ReduceOp::kSum));
  ch.reset();
  ScriptedAggregator again;  // a rebuilt rail on the same fabric
  ch = connected(again);
  EXPECT_FALSE(ch->supports(DataType::kBFloat16, ReduceOp::kSum));
  ch.reset();
  const std::string log = testing::internal::GetCapturedStderr();
  const std::string said = "bfloat16 not in its capabilities: stays on the byte rails";
  ASSERT_NE(log.find(said), std::string::npos) << log;
  EXPECT_EQ(log.find(said), log.rfind(said)) << "said more than once:\n" << log;
  EXPECT_NE(log.find("rail ib0 (sharp): the fabric (SHARP packet version 2) reduces float32"),
            std::string::npos)
      << log;

  setenv("NEZHA_SHARP_DOUBLE_GENERATION", "3", 1);
  ScriptedAggregator v3;
  ch = connected(v3);
  EXPECT_TRUE(ch->supports(DataType::kBFloat16, ReduceOp::kSum));
  EXPECT_EQ(stats().unsupportedDatatypes, 0u);
}

// The double itself catches the way the rail used to give up (free the unfinished request,
// unregister its buffers, then free them): each step is counted, and the late result is
// dropped instead of written into the released region. It also refuses a datatype the
// fabric lacks, as the library does.
TEST_F(SharpChannelTest, TheDoubleCatchesFreeingAnUnfinishedRequest) {
  setenv("NEZHA_SHARP_DOUBLE_GENERATION", "2", 1);
  auto lib = sharp::SharpLibrary::load("ib0", NEZHA_SHARP_DOUBLE_PATH);
  sharp::sharp_coll_init_spec spec{};
  spec.config = *lib->defaultConfig;
  spec.config.ib_dev_list = "mlx5_0:1";
  spec.world_size = 1;
  spec.oob_colls.barrier = [](void*) { return 0; };
  spec.oob_colls.bcast = [](void*, void*, int, int) { return 0; };
  spec.oob_colls.gather = [](void*, int, void* sbuf, void* rbuf, int len) {
    std::memcpy(rbuf, sbuf, static_cast<size_t>(len));
    return 0;
  };
  sharp::sharp_coll_context* ctx = nullptr;
  ASSERT_EQ(lib->init(&spec, &ctx), sharp::SHARP_COLL_SUCCESS);
  sharp::sharp_coll_comm_init_spec cs{};
  cs.size = 1;
  sharp::sharp_coll_comm* comm = nullptr;
  ASSERT_EQ(lib->commInit(ctx, &cs, &comm), sharp::SHARP_COLL_SUCCESS);
  agg_.joined();
  std::vector<float> send{4.0f}, recv{0.0f};
  void *smr = nullptr, *rmr = nullptr;
  ASSERT_EQ(lib->regMr(ctx, send.data(), sizeof(float), &smr), sharp::SHARP_COLL_SUCCESS);
  ASSERT_EQ(lib->regMr(ctx, recv.data(), sizeof(float), &rmr), sharp::SHARP_COLL_SUCCESS);
  sharp::sharp_coll_reduce_spec r{};
  r.sbuf_desc.buffer = {send.data(), sizeof(float), smr};
  r.rbuf_desc.buffer = {recv.data(), sizeof(float), rmr};
  r.length = 1;
  r.op = sharp::SHARP_OP_SUM;
  r.tag_dtype = sharp::SHARP_DTYPE_NULL;
  void* req = nullptr;
  r.dtype = sharp::SHARP_DTYPE_BFLOAT16;
  EXPECT_EQ(lib->allreduceNb(comm, &r, &req), sharp::SHARP_COLL_ENOT_SUPP);
  EXPECT_EQ(stats().unsupportedDatatypes, 1u);
  r.dtype = sharp::SHARP_DTYPE_FLOAT;
  ASSERT_EQ(lib->allreduceNb(comm, &r, &req), sharp::SHARP_COLL_SUCCESS);
  EXPECT_EQ(lib->reqTest(req), 0);
  lib->reqFree(req);  // unfinished
  lib->deregMr(ctx, rmr);
  agg_.answer();
  auto progress =
      reinterpret_cast<int (*)(sharp::sharp_coll_context*)>(dlsym(lib_, "sharp_coll_progress"));
  ASSERT_NE(progress, nullptr);
  EXPECT_EQ(progress(ctx), sharp::SHARP_COLL_SUCCESS);
  const wire::Stats s = stats();
  EXPECT_EQ(s.unfinishedFrees, 1u);
  EXPECT_EQ(s.deregsInFlight, 1u);
  EXPECT_EQ(s.completions, 1u);
  EXPECT_EQ(s.completionsIntoReleasedMemory, 1u);
  EXPECT_EQ(recv[0], 0.0f);  // dropped, not written
  lib->deregMr(ctx, smr);
  lib->commDestroy(comm);
  lib->finalize(ctx);
}

}  // namespace
}  // namespace nezha
