// NCCL's buffers and the plugin's rdma rails (docs/nccl.md "GPU memory"): which memory the
// plugin tells NCCL it takes (ptrSupport), and the registrations NCCL asks for with regMr /
// regMrDmaBuf, one memory region per rdma rail (transport/verbs/memory_region.h).
//
// Zero copy (NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF: NCCL hands the plugin its GPU
// buffers) is only sound when the HCA moves every byte of them: the CPU cannot read or write
// GPU memory. So it needs every rail to be rdma (a tcp rail's socket copies through the CPU),
// every rail's HCA to register dma-bufs (how NCCL exports GPU memory to a NIC), and the verbs
// rail's data path to post from the caller's registered region instead of copying through its
// staging rings (transport/verbs/verbs_channel.h, kPostsFromCallerMemory). Otherwise the plugin
// stays host-staged: NCCL stages GPU data through pinned host buffers and hands over those.
//
// The registrations live in a protection domain of the plugin's own, one opened HCA port per
// rdma rail (the port the rail's VerbsChannel resolves, same discovery). Every verbs channel the
// plugin opens for that rail — each connection's, rebuilt ones included — opens on the same
// domain (linkMemory(), VerbsChannel's domain), so NCCL's lkeys and rkeys are valid in its
// queue pairs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nezha/nezha.hpp"
#include "transport/channel.h"

namespace nezha {
class MemoryRegion;
class VerbsDevice;
}  // namespace nezha

namespace nezha::ncclnet {

// How one connection (EngineLink) meets NCCL's memory.
struct LinkMemory {
  // Index = rail: the protection domain that rail's verbs channels open on (null for tcp rails;
  // empty: every channel opens its own, as the runtime's communicator does).
  std::vector<std::shared_ptr<const VerbsDevice>> domains;
  // Zero copy: NCCL's buffers may be GPU memory, so no byte of a message is touched by the CPU;
  // every message carries its registration (the mhandle) and moves by direct placement.
  bool zeroCopy = false;
};

// What one rail offers NCCL's buffers.
struct RailMemory {
  std::string name;
  std::string transport;  // "tcp" | "rdma"
  bool dmabuf = false;    // rdma: the rail's HCA registers dma-bufs
  std::string dmabufWhy;  // rdma: the probe's answer in words (memory_region.h toString)
};

// The plugin's answer to NCCL, decided once at init.
struct MemoryPath {
  bool zeroCopy = false;
  std::string why;  // for the init INFO line: what allows zero copy, or what prevents it
  int ptrSupport() const;
  // "zero-copy (ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF): ..." or
  // "host-staged (ptrSupport NCCL_PTR_HOST): ...".
  std::string describe() const;
};

// The rule at the top of this file. `dataPathZeroCopy`: the verbs rail posts from a caller's
// registered memory (VerbsChannel::kPostsFromCallerMemory in this build).
MemoryPath decideMemoryPath(const std::vector<RailMemory>& rails, bool dataPathZeroCopy);

// One regMr / regMrDmaBuf: a memory region per rdma rail (none for tcp rails), released by
// the destructor (deregMr).
class Registration {
 public:
  Registration();
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  // The regions, index = the rdma rail's index among the plugin's rails (null for tcp rails).
  const std::vector<std::unique_ptr<MemoryRegion>>& regions() const { return regions_; }
  // The keys a rail's work requests use for [data, data + bytes), which must lie inside this
  // registration (InvalidArgument naming both ranges otherwise); none for a tcp rail.
  std::optional<IoRegion> keysFor(size_t rail, const void* data, uint64_t bytes) const;

 private:
  friend class GpuMemory;
  std::vector<std::unique_ptr<MemoryRegion>> regions_;
};

class GpuMemory {
 public:
  // Opens each rdma rail's HCA port (`engine.rails`: name, interface, address, transport) and
  // probes it for dma-buf registration, then decides the path. Throws ConfigError naming the
  // rail when an rdma rail has no HCA port, RailError when it cannot be opened.
  explicit GpuMemory(const Options& engine);
  ~GpuMemory();
  GpuMemory(const GpuMemory&) = delete;
  GpuMemory& operator=(const GpuMemory&) = delete;

  const MemoryPath& path() const { return path_; }
  const std::vector<RailMemory>& rails() const { return rails_; }
  // What each connection opens its rails with: these domains, and the path's zero copy.
  LinkMemory linkMemory() const;

  // regMr: `bytes` at `data` with ibv_reg_mr on every rdma rail; no bytes register nothing.
  // Throws InvalidArgument for a null buffer of some bytes, RailError naming the rail and errno
  // when a registration fails.
  std::unique_ptr<Registration> registerPointer(void* data, size_t bytes) const;
  // regMrDmaBuf: `bytes` of dma-buf `fd` from `offset`, addressed as [data, data + bytes)
  // (iova = data, as NCCL's IB transport registers), with ibv_reg_dmabuf_mr on every rdma rail.
  // Throws ConfigError when the library has no ibv_reg_dmabuf_mr, InvalidArgument for a
  // negative fd, RailError naming the rail, the fd and errno when a registration fails.
  std::unique_ptr<Registration> registerDmabuf(void* data, size_t bytes, uint64_t offset,
                                               int fd) const;

 private:
  std::vector<RailMemory> rails_;
  // Index = rail; null for tcp rails. Shared with the rails' verbs channels, which may outlive
  // the plugin's own reference when a connection closes late.
  std::vector<std::shared_ptr<const VerbsDevice>> devices_;
  MemoryPath path_;
};

}  // namespace nezha::ncclnet
