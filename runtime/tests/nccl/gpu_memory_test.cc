// What the NCCL plugin tells NCCL about its buffers and how it registers them
// (nccl/gpu_memory.h, docs/nccl.md "GPU memory"): the rule for ptrSupport both ways, the
// registrations over the libibverbs test double (a memfd standing in for a GPU's dma-buf), and
// the plugin itself on an rdma rail, loaded as NCCL loads it: its INFO line, getProperties,
// regMr / regMrDmaBuf / deregMr and a message between registered buffers.
#include "nccl/gpu_memory.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nccl/net_abi.h"
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

TEST_F(GpuMemoryTest, ProbesEveryRdmaRailAndStaysHostStagedWhileTheRailCopies) {
  GpuMemory all(engine({"rdma", "rdma"}));
  ASSERT_EQ(all.rails().size(), 2u);
  for (const RailMemory& r : all.rails()) EXPECT_TRUE(r.dmabuf) << r.name << ": " << r.dmabufWhy;
  // This build's verbs rail still copies through its staging rings (verbs_channel.h).
  EXPECT_EQ(all.path().zeroCopy, VerbsChannel::kPostsFromCallerMemory);
  EXPECT_TRUE(contains(all.path().why, "staging rings")) << all.path().why;

  GpuMemory mixed(engine());
  EXPECT_FALSE(mixed.path().zeroCopy);
  EXPECT_TRUE(contains(mixed.path().why, "rail r0 is tcp")) << mixed.path().why;
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

// ---- the plugin, loaded as NCCL loads it, on one rdma rail -----------------------------------

std::mutex gLogMu;
std::string gInfoLines;  // what the plugin logged through NCCL's logger, under gLogMu
std::string logged() {
  std::lock_guard<std::mutex> lock(gLogMu);
  return gInfoLines;
}
void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char line[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(gLogMu);
  gInfoLines += std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + line + "\n";
}

TEST_F(GpuMemoryTest, ThePluginOnAnRdmaRailReportsItsPathAndRegistersNcclsBuffers) {
  setenv("NEZHA_RAILS", "r0=lo:rdma", 1);
  setenv("NEZHA_JOB_TOKEN", testing::kTestToken, 1);
  void* lib = dlopen(NEZHA_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const auto* net = static_cast<const ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  ncclNetCommConfig_v12_t config{-1};
  ASSERT_EQ(net->init(&ctx, 1, &config, logger, nullptr), ncclSuccess) << logged();
  EXPECT_TRUE(contains(logged(), "host-staged (ptrSupport NCCL_PTR_HOST): every rail is rdma"))
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

  // A message between buffers registered on the rdma rail arrives exact.
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *listen = nullptr, *send = nullptr, *recv = nullptr;
  ASSERT_EQ(net->listen(ctx, 0, handle, &listen), ncclSuccess) << logged();
  while (send == nullptr || recv == nullptr) {
    if (send == nullptr) {
      ASSERT_EQ(net->connect(ctx, 0, handle, &send, nullptr), ncclSuccess);
    }
    if (recv == nullptr) {
      ASSERT_EQ(net->accept(listen, &recv, nullptr), ncclSuccess);
    }
    std::this_thread::yield();
  }
  constexpr size_t kBytes = (1 << 20) + 3;
  std::vector<uint8_t> out(kBytes), in(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>(i * 13 + 7);
  void *sendMh = nullptr, *recvMh = nullptr;
  ASSERT_EQ(net->regMr(send, out.data(), kBytes, NCCL_PTR_HOST, &sendMh), ncclSuccess);
  ASSERT_EQ(net->regMr(recv, in.data(), kBytes, NCCL_PTR_HOST, &recvMh), ncclSuccess);
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_EQ(net->isend(send, out.data(), kBytes, 0, sendMh, nullptr, &sreq), ncclSuccess);
  void* data[1] = {in.data()};
  size_t sizes[1] = {kBytes};
  int tags[1] = {0};
  void* mhandles[1] = {recvMh};
  ASSERT_EQ(net->irecv(recv, 1, data, sizes, tags, mhandles, nullptr, &rreq), ncclSuccess);
  int sendDone = 0, recvDone = 0, got[1] = {0};
  while (!sendDone || !recvDone) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sreq, &sendDone, nullptr), ncclSuccess) << logged();
    }
    if (!recvDone) {
      ASSERT_EQ(net->test(rreq, &recvDone, got), ncclSuccess) << logged();
    }
    std::this_thread::yield();
  }
  EXPECT_EQ(got[0], static_cast<int>(kBytes));
  EXPECT_EQ(in, out);
  EXPECT_EQ(net->deregMr(send, sendMh), ncclSuccess);
  EXPECT_EQ(net->deregMr(recv, recvMh), ncclSuccess);
  EXPECT_EQ(net->closeSend(send), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recv), ncclSuccess);
  EXPECT_EQ(net->closeListen(listen), ncclSuccess);
  unsetenv("NEZHA_RAILS");
  unsetenv("NEZHA_JOB_TOKEN");
}

}  // namespace
}  // namespace nezha::ncclnet
