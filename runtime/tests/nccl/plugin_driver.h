// Drives libnccl-net-nezha.so as NCCL's proxy thread does, for tests that load it with dlopen
// (NEZHA_NCCL_PLUGIN_PATH): init through the v12 table with a logger that keeps what the plugin
// logged, a connection (listen, then connect/accept polled until both hand back a comm), and one
// message polled to completion with test().
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "nccl/net_abi.h"
#include "test_util.h"

namespace nezha::testing {

// What the plugin logged through NCCL's logger ("INFO ..." / "WARN ..." lines).
inline std::mutex gLogMu;
inline std::string gLogged;
inline std::string logged() {
  std::lock_guard<std::mutex> lock(gLogMu);
  return gLogged;
}
inline void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char line[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(gLogMu);
  gLogged += std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + line + "\n";
}

// The plugin on the rails `rails` (NEZHA_RAILS), initialised; null (with a test failure) when it
// cannot be loaded. A process initialises the plugin once: one rail set per test binary.
inline const ncclNet_v12_t* loadPlugin(const char* rails, void** ctx) {
  setenv("NEZHA_RAILS", rails, 1);
  setenv("NEZHA_JOB_TOKEN", kTestToken, 1);
  void* lib = dlopen(NEZHA_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(lib, nullptr) << dlerror();
  if (lib == nullptr) return nullptr;
  const auto* net = static_cast<const ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  EXPECT_NE(net, nullptr);
  if (net == nullptr) return nullptr;
  ncclNetCommConfig_v12_t config{-1};
  EXPECT_EQ(net->init(ctx, 1, &config, logger, nullptr), ncclSuccess) << logged();
  unsetenv("NEZHA_RAILS");
  unsetenv("NEZHA_JOB_TOKEN");
  return net;
}

struct Comms {
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
};

// One connection of this process to itself, set up as NCCL does.
inline void connectComms(const ncclNet_v12_t* net, void* ctx, Comms& c) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(net->listen(ctx, 0, handle, &c.listen), ncclSuccess) << logged();
  while (c.send == nullptr || c.recv == nullptr) {
    if (c.send == nullptr) {
      ASSERT_EQ(net->connect(ctx, 0, handle, &c.send, nullptr), ncclSuccess) << logged();
    }
    if (c.recv == nullptr) {
      ASSERT_EQ(net->accept(c.listen, &c.recv, nullptr), ncclSuccess) << logged();
    }
    std::this_thread::yield();
  }
}

inline void closeComms(const ncclNet_v12_t* net, const Comms& c) {
  EXPECT_EQ(net->closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net->closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net->closeListen(c.listen), ncclSuccess);
}

// One message: `bytes` at `out` (registration `sendMh`) into room for `room` at `in` (`recvMh`),
// polled to completion. `*got` = the size the receive reports.
inline void transfer(const ncclNet_v12_t* net, const Comms& c, void* out, size_t bytes,
                     void* sendMh, void* in, size_t room, void* recvMh, int* got) {
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_EQ(net->isend(c.send, out, bytes, 0, sendMh, nullptr, &sreq), ncclSuccess) << logged();
  void* data[1] = {in};
  size_t sizes[1] = {room};
  int tags[1] = {0};
  void* mhandles[1] = {recvMh};
  ASSERT_EQ(net->irecv(c.recv, 1, data, sizes, tags, mhandles, nullptr, &rreq), ncclSuccess)
      << logged();
  int sendDone = 0, recvDone = 0;
  while (!sendDone || !recvDone) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sreq, &sendDone, nullptr), ncclSuccess) << logged();
    }
    if (!recvDone) {
      ASSERT_EQ(net->test(rreq, &recvDone, got), ncclSuccess) << logged();
    }
    std::this_thread::yield();
  }
}

}  // namespace nezha::testing
