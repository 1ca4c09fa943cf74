// Raw verbs on the libibverbs test double's loopback HCA (fake_hca.h), below the rail: an opened
// device per GID, a connected RC queue-pair pair, a memfd standing in for a GPU's dma-buf. For
// the tests of external memory registration (memory_region.h), which the rail's own data path
// does not use.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/verbs/discovery.h"
#include "transport/verbs/verbs_device.h"

namespace nezha::testing {

// The file libibverbs.so.1 was loaded from in this process (dlopen by soname, as the transport
// does): which build of the test double LD_LIBRARY_PATH put in place of rdma-core's.
inline std::string loadedLibibverbs() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return std::string("not loadable: ") + dlerror();
  void* sym = dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1");
  Dl_info info{};
  if (sym == nullptr || dladdr(sym, &info) == 0) return "no ibv_get_device_list@IBVERBS_1.1";
  return info.dli_fname;
}

// The fake HCA's port whose GID is `ip` (127.0.0.1 or 127.0.0.2), opened.
inline std::unique_ptr<VerbsDevice> openLoopbackDevice(const std::string& sysfsRoot,
                                                       const std::string& ip) {
  RdmaRailQuery q;
  q.rail = "r0";
  q.iface = "lo";
  q.ipv4 = ip;
  return std::make_unique<VerbsDevice>(resolveRdmaPort(sysfsRoot, q), 64, 0, "r0");
}

// Two devices (GIDs 127.0.0.1 and 127.0.0.2) with one RC queue pair each, connected.
struct ConnectedPair {
  explicit ConnectedPair(const std::string& sysfsRoot) {
    dev[0] = openLoopbackDevice(sysfsRoot, "127.0.0.1");
    dev[1] = openLoopbackDevice(sysfsRoot, "127.0.0.2");
    QpAddress addr[2];
    for (int i = 0; i < 2; ++i) {
      qp[i] = std::make_unique<QueuePair>(*dev[i], 16, 16, 0);
      qp[i]->toInit();
      addr[i].qpn = qp[i]->qpn();
      std::memcpy(addr[i].gid, dev[i]->gid().raw, sizeof addr[i].gid);
      addr[i].psn = 100 + static_cast<uint32_t>(i);
      addr[i].mtu = dev[i]->portAttr().active_mtu;
    }
    qp[0]->connect(addr[0], addr[1]);
    qp[1]->connect(addr[1], addr[0]);
  }
  // Queue pairs before their devices.
  ~ConnectedPair() {
    for (auto& q : qp) q.reset();
  }
  std::unique_ptr<VerbsDevice> dev[2];
  std::unique_ptr<QueuePair> qp[2];
};

// The next completion on `dev`'s CQ. The deadline only bounds a hang: a completion that never
// comes fails the test instead of blocking it.
inline ibv_wc nextCompletion(const VerbsDevice& dev) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ibv_wc wc{};
  while (ibv_poll_cq(dev.cq(), 1, &wc) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "no completion on " << dev.where();
      wc.status = IBV_WC_GENERAL_ERR;
      return wc;
    }
    std::this_thread::yield();
  }
  return wc;
}

// Anonymous shared memory behind an fd: what the double maps for ibv_reg_dmabuf_mr, as the
// kernel maps a GPU's dma-buf for the HCA. Read and written through the fd, never through a
// mapping of the test's own, so bytes seen here went through the double's mapping.
class Memfd {
 public:
  explicit Memfd(size_t bytes) : fd_(memfd_create("nezha-dmabuf-stand-in", MFD_CLOEXEC)) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0);
  }
  ~Memfd() { close(fd_); }
  Memfd(const Memfd&) = delete;
  Memfd& operator=(const Memfd&) = delete;
  int fd() const { return fd_; }
  void write(uint64_t offset, const std::vector<uint8_t>& bytes) const {
    EXPECT_EQ(pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(bytes.size()));
  }
  std::vector<uint8_t> read(uint64_t offset, size_t n) const {
    std::vector<uint8_t> out(n);
    EXPECT_EQ(pread(fd_, out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
    return out;
  }

 private:
  int fd_;
};

}  // namespace nezha::testing
