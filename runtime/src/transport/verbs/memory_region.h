// External memory registered with a rail's HCA for zero-copy RDMA: host memory through
// ibv_reg_mr, GPU memory exported as a dma-buf through ibv_reg_dmabuf_mr (docs/rdma.md,
// "External memory and dma-buf").
//
// The rail's own data path does not use this: it stages through rings it registered itself,
// because the transport seam keeps no pointer to a caller's buffer once exchange() returns
// (verbs_channel.h says why a cache of user registrations is a corruption risk). This is for a
// caller that owns the lifetime of its buffers' registrations, the NCCL plugin: NCCL's regMr /
// regMrDmaBuf and deregMr bracket every use of a buffer, so a registration never outlives its
// memory. Each MemoryRegion is one ibv_mr, released by its destructor; it must go before the
// VerbsDevice (the protection domain) it was registered with, e.g. before its VerbsChannel.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/verbs/verbs_device.h"

namespace nezha {

enum class DmabufSupport {
  kSupported,        // ibv_reg_dmabuf_mr exists and the kernel/provider accepts dma-bufs
  kNoLibrarySymbol,  // libibverbs.so.1 predates rdma-core v34: no ibv_reg_dmabuf_mr@IBVERBS_1.12
  kRefusedByKernel,  // the call exists; the kernel or provider answers EOPNOTSUPP/EPROTONOSUPPORT
};
const char* toString(DmabufSupport s);

// Whether `dev` can register dma-buf memory. Probed the way NCCL's IB transport does it: a
// registration of fd -1 fails with EBADF where dma-buf works and with EOPNOTSUPP or
// EPROTONOSUPPORT where the kernel or the provider does not support it. One failing call;
// callers ask once per device.
DmabufSupport probeDmabufSupport(const VerbsDevice& dev);

class MemoryRegion {
 public:
  // What zero-copy needs: the HCA writes into it (receives), peers write and read it.
  static constexpr int kZeroCopyAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

  // Host memory [addr, addr + bytes); work requests address it by its pointer. Throws
  // InvalidArgument for a null or empty buffer, RailError(rail) naming the device and errno when
  // ibv_reg_mr fails.
  static std::unique_ptr<MemoryRegion> registerHost(const VerbsDevice& dev, void* addr,
                                                    size_t bytes, int rail,
                                                    int access = kZeroCopyAccess);

  // `bytes` of the dma-buf `fd` from `offset`, addressed in work requests as [iova, iova +
  // bytes): for a CUDA buffer its device pointer (NCCL's regMrDmaBuf passes data, size, offset,
  // fd; its IB transport registers with iova = data). The fd stays the caller's to close: the
  // kernel holds its own reference to the buffer while it is registered. Throws ConfigError
  // naming the library when it has no ibv_reg_dmabuf_mr (probeDmabufSupport says
  // kNoLibrarySymbol), InvalidArgument for a negative fd or no bytes, RailError(rail) naming the
  // device, the fd and errno when the registration fails.
  static std::unique_ptr<MemoryRegion> registerDmabuf(const VerbsDevice& dev, int fd,
                                                      uint64_t offset, size_t bytes, uint64_t iova,
                                                      int rail, int access = kZeroCopyAccess);

  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  // The address of byte 0 in work requests (the pointer, or the dma-buf's iova); not
  // ibv_mr::addr, which rdma-core sets to the offset for dma-buf regions.
  uint64_t address() const { return address_; }
  size_t size() const { return bytes_; }
  bool dmabuf() const { return dmabuf_; }
  ibv_mr* get() const { return mr_; }

 private:
  MemoryRegion(const VerbsLibrary& lib, ibv_mr* mr, uint64_t address, size_t bytes, bool dmabuf)
      : lib_(lib), mr_(mr), address_(address), bytes_(bytes), dmabuf_(dmabuf) {}
  const VerbsLibrary& lib_;
  ibv_mr* mr_;
  uint64_t address_;
  size_t bytes_;
  bool dmabuf_;
};

}  // namespace nezha
