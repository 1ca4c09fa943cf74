#include "transport/verbs/memory_region.h"

#include <cerrno>

#include "base/error.h"

namespace nezha {

const char* toString(DmabufSupport s) {
  switch (s) {
    case DmabufSupport::kSupported:
      return "supported";
    case DmabufSupport::kNoLibrarySymbol:
      return "unsupported: libibverbs.so.1 has no ibv_reg_dmabuf_mr (rdma-core older than v34)";
    case DmabufSupport::kRefusedByKernel:
      return "unsupported: the kernel or the RDMA provider refuses dma-buf registration";
  }
  return "unknown";
}

DmabufSupport probeDmabufSupport(const VerbsDevice& dev) {
  if (dev.lib().regDmabufMr == nullptr) return DmabufSupport::kNoLibrarySymbol;
  errno = 0;
  ibv_mr* mr = dev.lib().regDmabufMr(dev.pd(), 0, 0, 0, -1, 0);
  const int err = errno;
  // fd -1 can never register; should a provider accept it anyway, the call works.
  if (mr != nullptr) {
    dev.lib().deregMr(mr);
    return DmabufSupport::kSupported;
  }
  return err == EOPNOTSUPP || err == EPROTONOSUPPORT ? DmabufSupport::kRefusedByKernel
                                                     : DmabufSupport::kSupported;
}

std::unique_ptr<MemoryRegion> MemoryRegion::registerHost(const VerbsDevice& dev, void* addr,
                                                         size_t bytes, int rail, int access) {
  if (addr == nullptr || bytes == 0) {
    throw InvalidArgument(strCat(dev.where(), ": registering host memory needs a buffer (addr ",
                                 addr, ", ", bytes, " bytes)"));
  }
  ibv_mr* mr = dev.lib().regMr(dev.pd(), addr, bytes, access);
  if (mr == nullptr) {
    throw RailError(rail, strCat(dev.where(), ": ", sysError("ibv_reg_mr", errno), " (", bytes,
                                 " bytes at ", addr, ")"));
  }
  return std::unique_ptr<MemoryRegion>(
      new MemoryRegion(dev.lib(), mr, reinterpret_cast<uintptr_t>(addr), bytes, false));
}

std::unique_ptr<MemoryRegion> MemoryRegion::registerDmabuf(const VerbsDevice& dev, int fd,
                                                           uint64_t offset, size_t bytes,
                                                           uint64_t iova, int rail, int access) {
  if (dev.lib().regDmabufMr == nullptr) {
    throw ConfigError(strCat(dev.where(), ": dma-buf registration needs ibv_reg_dmabuf_mr@",
                             kRegDmabufMrVersion,
                             " (rdma-core v34 or later); this libibverbs.so.1 has none"));
  }
  if (fd < 0 || bytes == 0) {
    throw InvalidArgument(strCat(dev.where(),
                                 ": registering a dma-buf needs its fd and a size (fd ", fd, ", ",
                                 bytes, " bytes)"));
  }
  ibv_mr* mr = dev.lib().regDmabufMr(dev.pd(), offset, bytes, iova, fd, access);
  if (mr == nullptr) {
    throw RailError(rail, strCat(dev.where(), ": ", sysError("ibv_reg_dmabuf_mr", errno), " (fd ",
                                 fd, ", offset ", offset, ", ", bytes, " bytes)"));
  }
  return std::unique_ptr<MemoryRegion>(new MemoryRegion(dev.lib(), mr, iova, bytes, true));
}

MemoryRegion::~MemoryRegion() { lib_.deregMr(mr_); }

}  // namespace nezha
