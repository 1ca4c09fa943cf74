// SHARP rail pieces that need no fabric: configuration (sharp accepted, never alone), the
// library loader's refusals (absent library, a library without the SHARP symbols, one older
// than the layouts were checked against) and its success against the test double, the device
// string from fixture sysfs trees, which types and operators go to SHARP (capabilities
// included), and the scheduler's treatment of an offload rail (cold supported allreduces only;
// never in splits, barriers, cold byte paths or replays). The rail itself against the double:
// sharp_channel_test.cc.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "comm/config.h"
#include "schedule/scheduler.h"
#include "transport/sharp/sharp_channel.h"
#include "transport/sharp/sharp_library.h"
#include "transport/transport.h"

namespace nezha {
namespace {

namespace fs = std::filesystem;

Options sharpJob() {
  Options o;
  o.rails = {{"r0", "lo", "tcp", "127.0.0.1"},
             {"r1", "lo", "tcp", "127.0.0.1"},
             {"ib0", "lo", "sharp", "127.0.0.1"}};
  o.worldSize = 2;
  o.rank = 0;
  o.jobToken = std::string(64, 'a');
  return o;
}

TEST(SharpConfig, AcceptedInRailsNeverAlone) {
  auto rails = parseRails("r0=eth1:tcp,ib0=ib0:sharp");
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[1].transport, "sharp");
  Options o = sharpJob();
  EXPECT_NO_THROW(validateOptions(o));
  o.rails = {{"ib0", "ib0", "sharp", ""}, {"ib1", "ib1", "sharp", ""}};
  try {
    validateOptions(o);
    FAIL() << "only sharp rails accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at least one tcp or rdma rail"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parseRails("r0=eth1:sharpx"), ConfigError);
}

TEST(SharpLibraryLoad, AbsentLibraryNamesRailAndLibrary) {
  try {
    sharp::SharpLibrary::load("ib0", "/nonexistent/libsharp_coll.so");
    FAIL() << "loaded a library that does not exist";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rail ib0"), std::string::npos) << m;
    EXPECT_NE(m.find("/nonexistent/libsharp_coll.so"), std::string::npos) << m;
    EXPECT_NE(m.find("HPC-X"), std::string::npos) << m;
    EXPECT_NE(m.find("NEZHA_SHARP_LIBRARY"), std::string::npos) << m;
  }
}

TEST(SharpLibraryLoad, TransportRefusedAtConstructionWithoutTheLibrary) {
  Options o = sharpJob();
  o.sharpLibrary = "/nonexistent/libsharp_coll.so";
  try {
    makeTransport(o, 2, "127.0.0.1");
    FAIL() << "sharp rail built without its library";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rail ib0: transport \"sharp\" needs"), std::string::npos)
        << e.what();
  }
}

TEST(SharpLibraryLoad, LibraryWithoutSharpSymbolsRefused) {
  try {
    sharp::SharpLibrary::load("ib0", "libm.so.6");
    FAIL() << "libm taken for libsharp_coll";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has no symbol sharp_coll_init"), std::string::npos)
        << e.what();
  }
}

TEST(SharpLibraryLoad, OlderLibraryRefusedNamingItsVersion) {
  try {
    sharp::SharpLibrary::load("ib0", NEZHA_SHARP_DOUBLE_ABI4_PATH);
    FAIL() << "a libsharp_coll.so.4 accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rail ib0"), std::string::npos) << m;
    EXPECT_NE(m.find("libsharp_coll.so.4 (soname version 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("older than SHARP 3.x (libsharp_coll.so.5)"), std::string::npos) << m;
  }
}

TEST(SharpLibraryLoad, SonameMajor) {
  EXPECT_EQ(sharp::sonameMajor("libsharp_coll.so.5"), 5);
  EXPECT_EQ(sharp::sonameMajor("libsharp_coll.so.4.2.1"), 4);
  EXPECT_EQ(sharp::sonameMajor("libsharp_coll.so"), -1);
  EXPECT_EQ(sharp::sonameMajor(""), -1);
  EXPECT_EQ(sharp::sonameMajor("libsharp_coll.so.x"), -1);
}

// The double exports what the real library's callers use besides the runtime's calls: the
// default configuration, capabilities, explicit progress and the blocking collectives.
TEST(SharpLibraryLoad, TestDoubleExportsTheCallersSymbols) {
  void* h = dlopen(NEZHA_SHARP_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  for (const char* sym : {"sharp_coll_init", "sharp_coll_finalize", "sharp_coll_default_config",
                          "sharp_coll_caps_query", "sharp_coll_progress", "sharp_coll_comm_init",
                          "sharp_coll_comm_destroy", "sharp_coll_reg_mr", "sharp_coll_dereg_mr",
                          "sharp_coll_do_allreduce", "sharp_coll_do_allreduce_nb",
                          "sharp_coll_do_barrier", "sharp_coll_req_test", "sharp_coll_req_wait",
                          "sharp_coll_req_free", "sharp_coll_strerror"}) {
    EXPECT_NE(dlsym(h, sym), nullptr) << sym;
  }
  dlclose(h);
}

TEST(SharpLibraryLoad, TestDoubleResolves) {
  auto lib = sharp::SharpLibrary::load("ib0", NEZHA_SHARP_DOUBLE_PATH);
  ASSERT_NE(lib->init, nullptr);
  ASSERT_NE(lib->reqTest, nullptr);
  ASSERT_NE(lib->capsQuery, nullptr);
  ASSERT_NE(lib->defaultConfig, nullptr);
  EXPECT_EQ(lib->soname(), "libsharp_coll.so.5");
  EXPECT_NE(lib->errorText(sharp::SHARP_COLL_EDEV).find("(-9)"), std::string::npos);
  // Without an aggregator or a device the double refuses like the real library (no crash).
  sharp::sharp_coll_init_spec spec{};
  spec.world_size = 1;
  spec.config.ib_dev_list = "no-such-hca0";
  spec.oob_colls.barrier = [](void*) { return 0; };
  spec.oob_colls.bcast = [](void*, void*, int, int) { return 0; };
  spec.oob_colls.gather = [](void*, int, void*, void*, int) { return 0; };
  sharp::sharp_coll_context* ctx = nullptr;
  EXPECT_EQ(lib->init(&spec, &ctx), sharp::SHARP_COLL_EDEV);
  EXPECT_EQ(ctx, nullptr);
  // An interface name is not the library's device form ("<hca>:<port>"), even one that exists.
  spec.config.ib_dev_list = "lo";
  EXPECT_EQ(lib->init(&spec, &ctx), sharp::SHARP_COLL_EDEV);
  EXPECT_EQ(ctx, nullptr);
}

TEST(SharpDevice, FromSysfsOrTheInterface) {
  char tmpl[] = "/tmp/nezha-sharp-sysfs.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  // IPoIB interface ib0 on port 2 of mlx5_1 (dev_port is 0-based).
  fs::create_directories(root / "class/net/ib0/device/infiniband/mlx5_1");
  std::ofstream(root / "class/net/ib0/dev_port") << "1\n";
  fs::create_directories(root / "class/infiniband/mlx5_1/ports/1");
  fs::create_directories(root / "class/infiniband/mlx5_1/ports/2/gids");
  std::ofstream(root / "class/infiniband/mlx5_1/ports/2/link_layer") << "InfiniBand\n";
  std::ofstream(root / "class/infiniband/mlx5_1/ports/1/link_layer") << "InfiniBand\n";
  std::ofstream(root / "class/infiniband/mlx5_1/ports/2/gids/0")
      << "fe80:0000:0000:0000:0000:0000:0000:0001\n";
  std::string why;
  EXPECT_EQ(SharpChannel::deviceFor("ib0", "ib0", "10.0.0.1", root.string(), &why), "mlx5_1:2")
      << why;
  // A veth (the test bed) has no HCA: the interface name, and discovery's reason.
  why.clear();
  fs::create_directories(root / "class/net/r2");
  EXPECT_EQ(SharpChannel::deviceFor("r2", "r2", "10.102.0.10", root.string(), &why), "r2");
  EXPECT_FALSE(why.empty());
  fs::remove_all(root);
}

TEST(SharpOffload, SupportedTypesAndOperators) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                      DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      EXPECT_TRUE(SharpChannel::supported(dt, op)) << toString(dt) << " " << toString(op);
    }
    EXPECT_FALSE(SharpChannel::supported(dt, ReduceOp::kProd)) << toString(dt);
  }
}

// The SHARPv3 datatypes only where the capabilities list them; the older ones always.
TEST(SharpOffload, TypesFromCapabilities) {
  const uint64_t all = (uint64_t{1} << sharp::SHARP_DTYPE_NULL) - 1;
  const uint64_t v2 = all & ~(uint64_t{1} << sharp::SHARP_DTYPE_BFLOAT16) &
                      ~(uint64_t{1} << sharp::SHARP_DTYPE_INT8) &
                      ~(uint64_t{1} << sharp::SHARP_DTYPE_UINT8);
  auto has = [](uint32_t types, DataType dt) {
    return (types & (1u << static_cast<unsigned>(dt))) != 0;
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt32,
                      DataType::kInt64}) {
    EXPECT_TRUE(has(SharpChannel::offloadTypesFrom(v2), dt)) << toString(dt);
    EXPECT_TRUE(has(SharpChannel::offloadTypesFrom(0), dt)) << toString(dt);
  }
  EXPECT_FALSE(has(SharpChannel::offloadTypesFrom(v2), DataType::kBFloat16));
  EXPECT_TRUE(has(SharpChannel::offloadTypesFrom(all), DataType::kBFloat16));
}

class OffloadScheduler : public ::testing::Test {
 protected:
  OffloadScheduler() {
    o_ = sharpJob();
    o_.coldThreshold = 64 << 10;
    o_.minSliceBytes = 0;
    // The SHARP rail probes as the quickest and widest: it must still never be the cold or
    // best byte rail, nor get a share of a split.
    probe_ = ProbeResult{{50e-6, 60e-6, 5e-6}, {1e9, 1e9, 1e10}};
  }
  Options o_;
  ProbeResult probe_;
};

TEST_F(OffloadScheduler, ColdSupportedAllreduceGoesToSharp) {
  Scheduler s(o_, probe_, Table({"r0", "r1", "ib0"}));
  EXPECT_EQ(s.offloadRail(), 2);
  EXPECT_NE(s.coldRail(), 2);
  EXPECT_NE(s.bestRail(), 2);
  Plan p = s.plan(OpKind::kAllreduce, 1024, 4, true);
  ASSERT_EQ(p.slices.size(), 1u);
  EXPECT_EQ(p.slices[0].rail, 2);
  EXPECT_FALSE(p.hot);
  // Unsupported type/operator, other collectives, barriers: byte rails.
  p = s.plan(OpKind::kAllreduce, 1024, 4, false);
  ASSERT_EQ(p.slices.size(), 1u);
  EXPECT_NE(p.slices[0].rail, 2);
  for (OpKind op :
       {OpKind::kBroadcast, OpKind::kAllgather, OpKind::kReduceScatter, OpKind::kBarrier}) {
    p = s.plan(op, 16, 4, true);
    for (const Slice& sl : p.slices) EXPECT_NE(sl.rail, 2) << toString(op);
  }
}

TEST_F(OffloadScheduler, HotSplitsAndReplaysAvoidSharp) {
  Scheduler s(o_, probe_, Table({"r0", "r1", "ib0"}));
  Plan p = s.plan(OpKind::kAllreduce, 1 << 20, 4, true);  // 4 MiB: hot
  EXPECT_TRUE(p.hot);
  ASSERT_EQ(p.slices.size(), 2u);
  for (const Slice& sl : p.slices) EXPECT_NE(sl.rail, 2);
  // A cold SHARP op whose rail failed: the replay goes to a byte rail.
  Plan cold = s.plan(OpKind::kAllreduce, 1024, 4, true);
  s.setAlive({true, true, false});
  EXPECT_EQ(s.offloadRail(), -1);
  for (const Slice& sl : s.resplit(cold, cold.slices)) EXPECT_NE(sl.rail, 2);
  p = s.plan(OpKind::kAllreduce, 1024, 4, true);
  ASSERT_EQ(p.slices.size(), 1u);
  EXPECT_NE(p.slices[0].rail, 2);
  // Re-admitted: back on SHARP; its re-measurement changes no split.
  s.setAlive({true, true, true});
  s.remeasure(2, 1e-6, 1e11);
  EXPECT_EQ(s.plan(OpKind::kAllreduce, 1024, 4, true).slices[0].rail, 2);
  for (const Slice& sl : s.plan(OpKind::kAllreduce, 1 << 20, 4, true).slices) {
    EXPECT_NE(sl.rail, 2);
  }
}

TEST_F(OffloadScheduler, SharpAloneIsNoRailLeft) {
  Scheduler s(o_, probe_, Table({"r0", "r1", "ib0"}));
  EXPECT_TRUE(s.anyByteRail({true, false, true}));
  EXPECT_FALSE(s.anyByteRail({false, false, true}));
}

}  // namespace
}  // namespace nezha
