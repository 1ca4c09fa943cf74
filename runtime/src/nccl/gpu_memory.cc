#include "nccl/gpu_memory.h"

#include "base/error.h"
#include "base/params.h"
#include "nccl/net_abi.h"

#ifdef NEZHA_WITH_VERBS
#include "transport/verbs/discovery.h"
#include "transport/verbs/memory_region.h"
#include "transport/verbs/verbs_channel.h"
#include "transport/verbs/verbs_device.h"
#else
namespace nezha {
// A build without the verbs transport refuses rdma rails at config time (transport.cc), so no
// object of either type is ever made; the definitions only complete the types.
class MemoryRegion {};
class VerbsDevice {};
}  // namespace nezha
#endif

namespace nezha::ncclnet {

int MemoryPath::ptrSupport() const {
  return zeroCopy ? NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF : NCCL_PTR_HOST;
}

std::string MemoryPath::describe() const {
  return zeroCopy
             ? strCat("zero-copy (ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF): ", why)
             : strCat("host-staged (ptrSupport NCCL_PTR_HOST): ", why);
}

MemoryPath decideMemoryPath(const std::vector<RailMemory>& rails, bool dataPathZeroCopy) {
  for (const RailMemory& r : rails) {
    if (r.transport != "rdma") {
      return {false, strCat("rail ", r.name, " is ", r.transport,
                            " (GPU memory needs every rail to be rdma)")};
    }
  }
  for (const RailMemory& r : rails) {
    if (!r.dmabuf) return {false, strCat("rail ", r.name, "'s HCA: dma-buf ", r.dmabufWhy)};
  }
  if (!dataPathZeroCopy) {
    return {false,
            "every rail is rdma and takes dma-bufs, but the verbs rail's data path still copies "
            "through its staging rings (transport/verbs/verbs_channel.h)"};
  }
  return {true, "every rail is rdma and its HCA registers dma-bufs"};
}

LinkMemory GpuMemory::linkMemory() const { return LinkMemory{devices_, path_.zeroCopy}; }

Registration::Registration() = default;
Registration::~Registration() = default;

#ifdef NEZHA_WITH_VERBS

std::optional<IoRegion> Registration::keysFor(size_t rail, const void* data, uint64_t bytes) const {
  if (rail >= regions_.size() || regions_[rail] == nullptr) return std::nullopt;
  const MemoryRegion& mr = *regions_[rail];
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (begin < mr.address() || begin + bytes > mr.address() + mr.size()) {
    throw InvalidArgument(strCat(bytes, " bytes at ", begin, " lie outside their registration (",
                                 mr.size(), " bytes at ", mr.address(), ")"));
  }
  return IoRegion{mr.lkey(), mr.rkey()};
}

GpuMemory::GpuMemory(const Options& engine) {
  const std::string sysfsRoot = paramString("NEZHA_RDMA_SYSFS_ROOT");
  for (size_t r = 0; r < engine.rails.size(); ++r) {
    const RailSpec& spec = engine.rails[r];
    RailMemory m{spec.name, spec.transport, false, ""};
    std::shared_ptr<const VerbsDevice> dev;
    if (spec.transport == "rdma") {
      // The port the rail's VerbsChannel opens (same discovery, same query).
      RdmaRailQuery q;
      q.rail = spec.name;
      q.iface = spec.iface;
      q.ipv4 = spec.address;
      // A CQ of one: this device only holds registrations and the domain the rail's channels
      // share; each channel completes its work on a CQ of its own.
      dev = std::make_shared<const VerbsDevice>(resolveRdmaPort(sysfsRoot, q), 1,
                                                static_cast<int>(r), spec.name);
      const DmabufSupport support = probeDmabufSupport(*dev);
      m.dmabuf = support == DmabufSupport::kSupported;
      m.dmabufWhy = toString(support);
    }
    rails_.push_back(std::move(m));
    devices_.push_back(std::move(dev));
  }
  path_ = decideMemoryPath(rails_, VerbsChannel::kPostsFromCallerMemory);
}

std::unique_ptr<Registration> GpuMemory::registerPointer(void* data, size_t bytes) const {
  auto reg = std::make_unique<Registration>();
  // A buffer of no bytes (NCCL's 0-byte messages) is never read or written: nothing to pin.
  if (bytes == 0) {
    reg->regions_.resize(devices_.size());
    return reg;
  }
  for (size_t r = 0; r < devices_.size(); ++r) {
    reg->regions_.push_back(
        devices_[r] == nullptr
            ? nullptr
            : MemoryRegion::registerHost(*devices_[r], data, bytes, static_cast<int>(r)));
  }
  return reg;
}

std::unique_ptr<Registration> GpuMemory::registerDmabuf(void* data, size_t bytes, uint64_t offset,
                                                        int fd) const {
  auto reg = std::make_unique<Registration>();
  for (size_t r = 0; r < devices_.size(); ++r) {
    reg->regions_.push_back(devices_[r] == nullptr
                                ? nullptr
                                : MemoryRegion::registerDmabuf(*devices_[r], fd, offset, bytes,
                                                               reinterpret_cast<uintptr_t>(data),
                                                               static_cast<int>(r)));
  }
  return reg;
}

#else  // no verbs transport: every rail is tcp, nothing to register

std::optional<IoRegion> Registration::keysFor(size_t, const void*, uint64_t) const {
  return std::nullopt;
}

GpuMemory::GpuMemory(const Options& engine) {
  for (const RailSpec& spec : engine.rails)
    rails_.push_back({spec.name, spec.transport, false, ""});
  devices_.resize(rails_.size());
  path_ = decideMemoryPath(rails_, false);
}

std::unique_ptr<Registration> GpuMemory::registerPointer(void*, size_t) const {
  return std::make_unique<Registration>();
}

std::unique_ptr<Registration> GpuMemory::registerDmabuf(void*, size_t, uint64_t, int) const {
  return std::make_unique<Registration>();
}

#endif

GpuMemory::~GpuMemory() = default;

}  // namespace nezha::ncclnet
