// libnccl-net-nezha.so as NCCL sees it: loaded with dlopen, reached only through its exported
// tables, with the member order of NVIDIA's published net_v8.h / net_v11.h / net_v12.h pinned
// (offset of every member, size of every struct, x86-64/aarch64 LP64), and misuse answered
// with error codes: a handle of random bytes, a handle whose scratch names no connection, a
// comm used after its close, a request that is not one. Messages cross a connection exactly
// through the tables alone, and a retired plugin-only knob fails init naming its replacement.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nccl/net_abi.h"

namespace {

constexpr char kToken[] = "9f2c1e7a4b6d8f0312a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9";

// Members of each published function table, in order: every one is a pointer.
#define PIN(T, m, i) EXPECT_EQ(offsetof(T, m), size_t(i) * sizeof(void*)) << #T "." #m
#define PIN_COMMON_CALLS(T) \
  PIN(T, name, 0);          \
  PIN(T, init, 1);          \
  PIN(T, devices, 2);       \
  PIN(T, getProperties, 3); \
  PIN(T, listen, 4);        \
  PIN(T, connect, 5);       \
  PIN(T, accept, 6);        \
  PIN(T, regMr, 7);         \
  PIN(T, regMrDmaBuf, 8);   \
  PIN(T, deregMr, 9);       \
  PIN(T, isend, 10);        \
  PIN(T, irecv, 11);        \
  PIN(T, iflush, 12);       \
  PIN(T, test, 13);         \
  PIN(T, closeSend, 14);    \
  PIN(T, closeRecv, 15);    \
  PIN(T, closeListen, 16);  \
  PIN(T, getDeviceMr, 17);  \
  PIN(T, irecvConsumed, 18)

TEST(NcclAbi, FunctionTablesFollowThePublishedMemberOrder) {
  PIN_COMMON_CALLS(ncclNet_v8_t);
  EXPECT_EQ(sizeof(ncclNet_v8_t), 19 * sizeof(void*));
  PIN_COMMON_CALLS(ncclNet_v11_t);
  PIN(ncclNet_v11_t, makeVDevice, 19);
  PIN(ncclNet_v11_t, finalize, 20);
  PIN(ncclNet_v11_t, setNetAttr, 21);
  EXPECT_EQ(sizeof(ncclNet_v11_t), 22 * sizeof(void*));
  PIN_COMMON_CALLS(ncclNet_v12_t);
  PIN(ncclNet_v12_t, makeVDevice, 19);
  PIN(ncclNet_v12_t, finalize, 20);
  PIN(ncclNet_v12_t, setNetAttr, 21);
  EXPECT_EQ(sizeof(ncclNet_v12_t), 22 * sizeof(void*));
}

// The members every version shares, and those v11 and v12 share (v11 inserted forceFlush).
template <typename P>
void expectHead() {
  EXPECT_EQ(offsetof(P, pciPath), 8u);
  EXPECT_EQ(offsetof(P, guid), 16u);
  EXPECT_EQ(offsetof(P, ptrSupport), 24u);
  EXPECT_EQ(offsetof(P, regIsGlobal), 28u);
}
template <typename P>
void expectVirtualHead() {
  expectHead<P>();
  const size_t at[] = {offsetof(P, forceFlush),    offsetof(P, speed),
                       offsetof(P, port),          offsetof(P, latency),
                       offsetof(P, maxComms),      offsetof(P, maxRecvs),
                       offsetof(P, netDeviceType), offsetof(P, netDeviceVersion),
                       offsetof(P, vProps)};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; ++i) EXPECT_EQ(at[i], 32 + 4 * i) << i;
}

// v11 and v12 after the head: the virtual device (v12's holds 8 devices, not 4), then the
// transfer limits.
template <typename P>
void expectVirtual(size_t vPropsBytes, size_t maxP2pAt) {
  expectVirtualHead<P>();
  EXPECT_EQ(sizeof(P::vProps), vPropsBytes);
  EXPECT_EQ(offsetof(P, maxP2pBytes), maxP2pAt);
  EXPECT_EQ(offsetof(P, maxCollBytes), maxP2pAt + 8);
  EXPECT_EQ(offsetof(P, maxMultiRequestSize), maxP2pAt + 16);
}

TEST(NcclAbi, PropertyStructsFollowThePublishedMemberOrder) {
  static_assert(sizeof(void*) == 8, "the pinned offsets are LP64's");
  expectHead<ncclNetProperties_v8_t>();
  const size_t v8[] = {offsetof(ncclNetProperties_v8_t, speed),
                       offsetof(ncclNetProperties_v8_t, port),
                       offsetof(ncclNetProperties_v8_t, latency),
                       offsetof(ncclNetProperties_v8_t, maxComms),
                       offsetof(ncclNetProperties_v8_t, maxRecvs),
                       offsetof(ncclNetProperties_v8_t, netDeviceType),
                       offsetof(ncclNetProperties_v8_t, netDeviceVersion)};
  for (size_t i = 0; i < sizeof v8 / sizeof v8[0]; ++i) EXPECT_EQ(v8[i], 32 + 4 * i) << i;
  EXPECT_EQ(sizeof(ncclNetProperties_v8_t), 64u);

  expectVirtual<ncclNetProperties_v11_t>(20, 88);
  EXPECT_EQ(sizeof(ncclNetProperties_v11_t), 112u);
  expectVirtual<ncclNetProperties_v12_t>(36, 104);
  // Two ids end v12's properties.
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, railId), 124u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, planeId), 126u);
  EXPECT_EQ(sizeof(ncclNetProperties_v12_t), 128u);

  EXPECT_EQ(sizeof(ncclNetDeviceHandle_v12_t), 32u);
  EXPECT_EQ(sizeof(ncclNetCommConfig_v12_t), 4u);
  EXPECT_EQ(sizeof(ncclNetAttr_v12_t), 44u);
}

// The plugin, loaded the way NCCL loads it.
class NcclPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
    setenv("NEZHA_JOB_TOKEN", kToken, 1);
    lib_ = dlopen(NEZHA_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    v12_ = static_cast<const ncclNet_v12_t*>(dlsym(lib_, "ncclNetPlugin_v12"));
    ASSERT_NE(v12_, nullptr);
  }
  void TearDown() override {
    unsetenv("NEZHA_RAILS");
    unsetenv("NEZHA_JOB_TOKEN");
  }
  void init() {
    void* ctx = nullptr;
    ncclNetCommConfig_v12_t config{-1};
    ASSERT_EQ(v12_->init(&ctx, 1, &config, nullptr, nullptr), ncclSuccess);
  }
  // A connected pair over the plugin's loopback rail, polled as NCCL's proxy thread does:
  // connect() and accept() return a null comm until the connection's set-up (on the plugin's
  // own thread) is done, or an error code if it failed (NEZHA_NCCL_CONNECT_TIMEOUT_MS).
  void connectPair(void** send, void** recv) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listen = nullptr;
    ASSERT_EQ(v12_->listen(nullptr, 0, handle, &listen), ncclSuccess);
    *send = *recv = nullptr;
    while (*send == nullptr || *recv == nullptr) {
      if (*send == nullptr) {
        ASSERT_EQ(v12_->connect(nullptr, 0, handle, send, nullptr), ncclSuccess);
      }
      if (*recv == nullptr) {
        ASSERT_EQ(v12_->accept(listen, recv, nullptr), ncclSuccess);
      }
      std::this_thread::yield();
    }
    ASSERT_NE(*send, nullptr);
    ASSERT_NE(*recv, nullptr);
    EXPECT_EQ(v12_->closeListen(listen), ncclSuccess);
  }
  void* lib_ = nullptr;
  const ncclNet_v12_t* v12_ = nullptr;
};

TEST_F(NcclPlugin, ExportsV12V11AndV8UnderOneName) {
  for (const char* sym : {"ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v8"}) {
    const auto* table = static_cast<const char* const*>(dlsym(lib_, sym));
    ASSERT_NE(table, nullptr) << sym;
    EXPECT_STREQ(table[0], "nezha") << sym;
  }
  init();
  ncclNetProperties_v12_t p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(v12_->getProperties(0, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "nezha");
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);  // tcp rails: host-staged
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.railId, -1);
  EXPECT_EQ(p.planeId, -1);
  EXPECT_EQ(p.maxRecvs, 1);  // a connection's messages match in posting order
  ncclNetVDeviceProps_v12_t merge{2, {0, 0, 0, 0, 0, 0, 0, 0}};
  int d = -1;
  EXPECT_EQ(v12_->makeVDevice(&d, &merge), ncclInvalidUsage);
}

TEST_F(NcclPlugin, AHandleOfRandomBytesIsAnErrorCode) {
  init();
  std::mt19937 rng(7);
  for (int round = 0; round < 64; ++round) {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    for (auto& b : handle) b = static_cast<unsigned char>(rng());
    void* send = reinterpret_cast<void*>(1);
    EXPECT_EQ(v12_->connect(nullptr, 0, handle, &send, nullptr), ncclInvalidArgument);
    EXPECT_EQ(send, nullptr);
  }
  // Our magic, but a scratch that names no connection of this process.
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  ASSERT_EQ(v12_->listen(nullptr, 0, handle, &listen), ncclSuccess);
  for (size_t i = 112; i < sizeof handle; ++i) handle[i] = static_cast<unsigned char>(rng() | 1);
  void* send = nullptr;
  EXPECT_EQ(v12_->connect(nullptr, 0, handle, &send, nullptr), ncclInvalidArgument);
  EXPECT_EQ(send, nullptr);
  EXPECT_EQ(v12_->closeListen(listen), ncclSuccess);
}

TEST_F(NcclPlugin, CommsUsedAfterTheirCloseAndForeignRequestsAreErrorCodes) {
  init();
  void *send = nullptr, *recv = nullptr;
  connectPair(&send, &recv);
  char buf[64] = {};
  void* request = nullptr;
  ASSERT_EQ(v12_->closeSend(send), ncclSuccess);
  EXPECT_EQ(v12_->isend(send, buf, sizeof buf, 1, nullptr, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(v12_->closeSend(send), ncclInvalidArgument);
  int done = 1;
  EXPECT_EQ(v12_->test(buf, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(v12_->test(nullptr, &done, nullptr), ncclInvalidArgument);
  // A receive posted, then its comm closed: its request dies with it.
  void* data[1] = {buf};
  size_t sizes[1] = {sizeof buf};
  int tags[1] = {1};
  ASSERT_EQ(v12_->irecv(recv, 1, data, sizes, tags, nullptr, nullptr, &request), ncclSuccess);
  ASSERT_NE(request, nullptr);
  ASSERT_EQ(v12_->closeRecv(recv), ncclSuccess);
  EXPECT_EQ(v12_->test(request, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(v12_->irecv(recv, 1, data, sizes, tags, nullptr, nullptr, &request),
            ncclInvalidArgument);
  EXPECT_EQ(v12_->closeListen(buf), ncclInvalidArgument);
}

TEST_F(NcclPlugin, InitWithoutAJobTokenFailsNamingTheVariables) {
  unsetenv("NEZHA_JOB_TOKEN");
  unsetenv("NEZHA_JOB_TOKEN_FILE");
  testing::internal::CaptureStderr();
  void* ctx = nullptr;
  EXPECT_EQ(v12_->init(&ctx, 1, nullptr, nullptr, nullptr), ncclInvalidUsage);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("NEZHA_JOB_TOKEN_FILE and NEZHA_JOB_TOKEN are both unset"), std::string::npos)
      << err;
}

// Polls a request as NCCL's proxy thread does; the size test() reports.
int waitDone(const ncclNet_v12_t* net, void* request) {
  int done = 0, size = -1;
  while (done == 0) {
    EXPECT_EQ(net->test(request, &done, &size), ncclSuccess);
    if (::testing::Test::HasFailure()) return -1;
  }
  return size;
}

TEST_F(NcclPlugin, MessagesCrossAConnectionExactlyThroughTheTables) {
  init();
  void *send = nullptr, *recv = nullptr;
  connectPair(&send, &recv);
  ASSERT_FALSE(HasFatalFailure());
  for (size_t bytes : {size_t(0), size_t(1), size_t(4097), size_t(1) << 20}) {
    std::vector<unsigned char> out(bytes), in(bytes + 64, 0);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 7 + bytes);
    void *sreq = nullptr, *rreq = nullptr;
    // The receive is posted after the send: isend never waits for it.
    ASSERT_EQ(v12_->isend(send, out.data(), bytes, 0, nullptr, nullptr, &sreq), ncclSuccess);
    void* data[1] = {in.data()};
    size_t sizes[1] = {in.size()};
    int tags[1] = {0};
    ASSERT_EQ(v12_->irecv(recv, 1, data, sizes, tags, nullptr, nullptr, &rreq), ncclSuccess);
    EXPECT_EQ(waitDone(v12_, sreq), static_cast<int>(bytes));
    EXPECT_EQ(waitDone(v12_, rreq), static_cast<int>(bytes));  // the size sent, not the room
    EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << bytes << " bytes";
  }
  // Grouped receives are not offered (maxRecvs 1): asking for two is an error code.
  char a[8], b[8];
  void* data[2] = {a, b};
  size_t sizes[2] = {8, 8};
  int tags[2] = {0, 0};
  void* request = nullptr;
  EXPECT_EQ(v12_->irecv(recv, 2, data, sizes, tags, nullptr, nullptr, &request),
            ncclInvalidArgument);
  EXPECT_EQ(v12_->closeSend(send), ncclSuccess);
  EXPECT_EQ(v12_->closeRecv(recv), ncclSuccess);
}

// Runs in a process of its own (ctest runs each test so): the plugin keeps one context per
// process, created by the first init that succeeds.
TEST_F(NcclPlugin, RetiredKnobsFailInitNamingTheirReplacement) {
  const std::pair<const char*, const char*> retired[] = {
      {"NEZHA_NCCL_STALL_MS", "NEZHA_WATCHDOG_MS"},
      {"NEZHA_NCCL_READMIT_MS", "NEZHA_READMIT_HOLDDOWN_MS"},
      {"NEZHA_NCCL_CHUNK", "NEZHA_MIN_SLICE_BYTES"},
  };
  for (const auto& [knob, replacement] : retired) {
    setenv(knob, "100", 1);
    testing::internal::CaptureStderr();
    void* ctx = nullptr;
    EXPECT_EQ(v12_->init(&ctx, 1, nullptr, nullptr, nullptr), ncclInvalidUsage) << knob;
    const std::string err = testing::internal::GetCapturedStderr();
    unsetenv(knob);
    EXPECT_NE(err.find(std::string(knob) + " is retired"), std::string::npos) << err;
    EXPECT_NE(err.find(replacement), std::string::npos) << err;
  }
}

}  // namespace
