// What the NCCL plugin tells NCCL about its buffers and how it registers them
// (nccl/gpu_memory.h, docs/nccl.md "GPU memory"): the rule for ptrSupport both ways, the
// registrations over the libibverbs test double (a memfd standing in for a GPU's dma-buf), and
// the plugin itself on a tcp and an rdma rail, loaded as NCCL loads it: host-staged in its INFO
// line and getProperties, regMr / regMrDmaBuf / deregMr and a message between registered
// buffers. Zero copy itself: zero_copy_test.cc.
#include "nccl/gpu_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "nccl/net_abi.h"
#include "nccl/plugin_driver.h"
#include "test_util.h"
#include "transport/fake_hca.h"
#include "transport/verbs/memory_region.h"
#include "transport/verbs/verbs_channel.h"
#include "transport/verbs_pair.h"

namespace nezha::ncclnet {
namespace {

constexpr int kZeroCopyPtrs = NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MemoryPathRule, ZeroCopyOnlyWhenEveryRailIsRdmaTakesDmabufsAndPostsFromCallerMemory) {
  const RailMemory rdma{"r0", "rdma", true, "supported"};
  const RailMemory rdma2{"r1", "rdma", true, "supported"};
  const MemoryPath zero = decideMemoryPath({rdma, rdma2}, true);
  EXPECT_TRUE(zero.zeroCopy);
  EXPECT_EQ(zero.ptrSupport(), kZeroCopyPtrs);
  EXPECT_TRUE(contains(zero.describe(), "zero-copy (ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|"))
      << zero.describe();

  const MemoryPath mixed = decideMemoryPath({rdma, {"r1", "tcp", false, ""}}, true);
  EXPECT_FALSE(mixed.zeroCopy);
  EXPECT_EQ(mixed.ptrSupport(), NCCL_PTR_HOST);
  EXPECT_TRUE(contains(mixed.describe(), "host-staged (ptrSupport NCCL_PTR_HOST): rail r1 is tcp"))
      << mixed.describe();

  const MemoryPath noDmabuf =
      decideMemoryPath({rdma, {"r1", "rdma", false, "unsupported: the kernel refuses"}}, true);
  EXPECT_FALSE(noDmabuf.zeroCopy);
  EXPECT_TRUE(contains(noDmabuf.why, "rail r1's HCA: dma-buf unsupported: the kernel refuses"))
      << noDmabuf.why;

  const MemoryPath staging = decideMemoryPath({rdma, rdma2}, false);
  EXPECT_FALSE(staging.zeroCopy);
  EXPECT_TRUE(contains(staging.why, "staging rings")) << staging.why;
}

// How many mappings of the memfd this process holds: the double maps a dma-buf's fd at
// registration and unmaps it at deregistration, as the kernel pins and unpins the buffer.
int mappingsOfMemfd() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += contains(line, "nezha-dmabuf-stand-in");
  return n;
}

class GpuMemoryTest : public ::testing::Test {
 protected:
  // GIDs 127.0.0.1-3: up to three rails on the fake HCA.
  static void SetUpTestSuite() { hca_ = std::make_unique<testing::FakeHcaOnLoopback>(3); }
  static void TearDownTestSuite() { hca_.reset(); }
  // Rails r0 (tcp, 127.0.0.1) and r1 (rdma, 127.0.0.2) unless `transports` says otherwise.
  static Options engine(const std::vector<std::string>& transports = {"tcp", "rdma"}) {
    Options o;
    o.rails = testing::loopbackRails(static_cast<int>(transports.size()));
    for (size_t r = 0; r < transports.size(); ++r) o.rails[r].transport = transports[r];
    return o;
  }
  static std::unique_ptr<testing::FakeHcaOnLoopback> hca_;
};
std::unique_ptr<testing::FakeHcaOnLoopback> GpuMemoryTest::hca_;

TEST_F(GpuMemoryTest, ProbesEveryRdmaRailAndIsZeroCopyOnlyWhenEveryRailIsRdma) {
  GpuMemory all(engine({"rdma", "rdma"}));
  ASSERT_EQ(all.rails().size(), 2u);
  for (const RailMemory& r : all.rails()) EXPECT_TRUE(r.dmabuf) << r.name << ": " << r.dmabufWhy;
  // The verbs rail posts from registered memory (verbs_channel.h, direct placement).
  ASSERT_TRUE(VerbsChannel::kPostsFromCallerMemory);
  EXPECT_TRUE(all.path().zeroCopy) << all.path().why;
  EXPECT_TRUE(contains(all.path().why, "every rail is rdma and its HCA registers dma-bufs"))
      << all.path().why;
  const LinkMemory links = all.linkMemory();
  EXPECT_TRUE(links.zeroCopy);
  ASSERT_EQ(links.domains.size(), 2u);
  for (const auto& d : links.domains) EXPECT_NE(d, nullptr) << "rdma rails share their domain";

  GpuMemory mixed(engine());
  EXPECT_FALSE(mixed.path().zeroCopy);
  EXPECT_TRUE(contains(mixed.path().why, "rail r0 is tcp")) << mixed.path().why;
  EXPECT_FALSE(mixed.linkMemory().zeroCopy);
  EXPECT_EQ(mixed.linkMemory().domains[0], nullptr) << "a tcp rail has no domain";
}

TEST_F(GpuMemoryTest, AKernelWithoutDmabufIsNamedInTheReason) {
  setenv("NEZHA_IBV_DOUBLE_DMABUF", "unsupported", 1);
  GpuMemory memory(engine({"rdma"}));
  unsetenv("NEZHA_IBV_DOUBLE_DMABUF");
  EXPECT_FALSE(memory.rails()[0].dmabuf);
  EXPECT_TRUE(contains(memory.path().why, "rail r0's HCA: dma-buf unsupported: the kernel"))
      << memory.path().why;
}

TEST_F(GpuMemoryTest, RegistersADmabufOnEveryRdmaRailAndReleasesItWithTheRegistration) {
  GpuMemory memory(engine({"tcp", "rdma", "rdma"}));
  constexpr size_t kBytes = 1 << 20;
  testing::Memfd buffer(2 * kBytes);
  buffer.write(kBytes, std::vector<uint8_t>(16, 0xab));
  // The address NCCL names the buffer by (a CUDA pointer on a GPU; any iova for the double).
  void* const iova = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});
  const int before = mappingsOfMemfd();
  auto reg = memory.registerDmabuf(iova, kBytes, kBytes, buffer.fd());
  ASSERT_EQ(reg->regions().size(), 3u);
  EXPECT_EQ(reg->regions()[0], nullptr) << "a tcp rail registers nothing";
  for (size_t r = 1; r < 3; ++r) {
    const MemoryRegion* region = reg->regions()[r].get();
    ASSERT_NE(region, nullptr) << r;
    EXPECT_TRUE(region->dmabuf());
    EXPECT_EQ(region->address(), reinterpret_cast<uintptr_t>(iova));
    EXPECT_EQ(region->size(), kBytes);
  }
  EXPECT_EQ(mappingsOfMemfd(), before + 2) << "one mapping per rdma rail's registration";
  reg.reset();  // deregMr
  EXPECT_EQ(mappingsOfMemfd(), before) << "deregistration released the dma-buf";

  EXPECT_THROW(memory.registerDmabuf(iova, kBytes, 0, -1), InvalidArgument);
}

TEST_F(GpuMemoryTest, RegistersHostMemoryOnEveryRdmaRail) {
  GpuMemory memory(engine());
  std::vector<uint8_t> host(4096);
  auto reg = memory.registerPointer(host.data(), host.size());
  ASSERT_EQ(reg->regions().size(), 2u);
  EXPECT_EQ(reg->regions()[0], nullptr);
  ASSERT_NE(reg->regions()[1], nullptr);
  EXPECT_FALSE(reg->regions()[1]->dmabuf());
  EXPECT_EQ(reg->regions()[1]->address(), reinterpret_cast<uintptr_t>(host.data()));
  EXPECT_THROW(memory.registerPointer(nullptr, 16), InvalidArgument);
  // A 0-byte buffer (NCCL's harness registers those for 0-byte messages) pins nothing.
  auto empty = memory.registerPointer(nullptr, 0);
  ASSERT_EQ(empty->regions().size(), 2u);
  EXPECT_EQ(empty->regions()[1], nullptr);
}

// ---- the plugin, loaded as NCCL loads it, on a tcp and an rdma rail ---------------------------
// (two rdma rails, zero copy: nccl/zero_copy_test.cc)

using testing::logged;

TEST_F(GpuMemoryTest, ThePluginOnMixedRailsIsHostStagedAndRegistersNcclsBuffers) {
  void* ctx = nullptr;
  const ncclNet_v12_t* net = testing::loadPlugin("r0=lo:tcp,r1=lo:rdma", &ctx);
  ASSERT_NE(net, nullptr);
  EXPECT_TRUE(contains(logged(), "host-staged (ptrSupport NCCL_PTR_HOST): rail r0 is tcp"))
      << logged();
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);

  // GPU memory is refused while host-staged, with a warning saying why.
  void* mh = nullptr;
  std::vector<uint8_t> gpuStandIn(64);
  EXPECT_EQ(net->regMr(nullptr, gpuStandIn.data(), 64, NCCL_PTR_CUDA, &mh), ncclInternalError);
  EXPECT_EQ(mh, nullptr);
  EXPECT_TRUE(contains(
      logged(),
      "regMr: registration of GPU memory (type 2) asked for, but the plugin is host-staged"))
      << logged();

  // A dma-buf of host memory registers with ibv_reg_dmabuf_mr and deregMr releases it.
  testing::Memfd buffer(1 << 16);
  const int before = mappingsOfMemfd();
  ASSERT_EQ(
      net->regMrDmaBuf(nullptr, gpuStandIn.data(), 1 << 16, NCCL_PTR_HOST, 0, buffer.fd(), &mh),
      ncclSuccess)
      << logged();
  EXPECT_EQ(mappingsOfMemfd(), before + 1);
  EXPECT_EQ(net->deregMr(nullptr, mh), ncclSuccess);
  EXPECT_EQ(mappingsOfMemfd(), before);
  EXPECT_EQ(net->deregMr(nullptr, mh), ncclInvalidArgument) << "a handle deregistered already";

  // A message between registered buffers arrives exact over both rails (host-staged: the CPU
  // may copy them, and the tcp rail does).
  testing::Comms comms;
  ASSERT_NO_FATAL_FAILURE(testing::connectComms(net, ctx, comms));
  constexpr size_t kBytes = (1 << 20) + 3;
  std::vector<uint8_t> out(kBytes), in(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>(i * 13 + 7);
  void *sendMh = nullptr, *recvMh = nullptr;
  ASSERT_EQ(net->regMr(comms.send, out.data(), kBytes, NCCL_PTR_HOST, &sendMh), ncclSuccess);
  ASSERT_EQ(net->regMr(comms.recv, in.data(), kBytes, NCCL_PTR_HOST, &recvMh), ncclSuccess);
  int got = 0;
  ASSERT_NO_FATAL_FAILURE(
      testing::transfer(net, comms, out.data(), kBytes, sendMh, in.data(), kBytes, recvMh, &got));
  EXPECT_EQ(got, static_cast<int>(kBytes));
  EXPECT_EQ(in, out);
  EXPECT_EQ(net->deregMr(comms.send, sendMh), ncclSuccess);
  EXPECT_EQ(net->deregMr(comms.recv, recvMh), ncclSuccess);
  testing::closeComms(net, comms);
}

}  // namespace
}  // namespace nezha::ncclnet
