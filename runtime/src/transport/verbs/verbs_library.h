// libibverbs, loaded at run time. libnezha is copied into worker images that may have no
// rdma-core (the operator's init container), so it must not link libibverbs.so.1: only a job
// with an rdma rail loads it (dlopen), and a worker image without it gets a clear ConfigError
// naming the rail instead of a library that fails to load. Symbols are looked up with the
// versions linking would have bound (dlvsym), so the ABI is exactly rdma-core's. The data-path
// calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are the header's inline
// wrappers around the context's ops table and need no lookup.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace nezha {

// The symbol version rdma-core v34 introduced ibv_reg_dmabuf_mr with.
inline constexpr char kRegDmabufMrVersion[] = "IBVERBS_1.12";

class VerbsLibrary {
 public:
  // Loads libibverbs.so.1 (the process's usual library search: LD_LIBRARY_PATH, ld.so.cache).
  // Throws ConfigError naming `rail` when it or a symbol is missing.
  explicit VerbsLibrary(const std::string& rail);
  // The handle is never closed: rdma-core's providers are not made to be unloaded, and dlopen
  // only counts references for the next channel.
  VerbsLibrary(const VerbsLibrary&) = delete;
  VerbsLibrary& operator=(const VerbsLibrary&) = delete;

  // ibv_query_port as the header's inline wrapper does it (extended contexts answer through
  // their own op; legacy ones through the exported call).
  int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;

  decltype(&::ibv_get_device_list) getDeviceList = nullptr;
  decltype(&::ibv_free_device_list) freeDeviceList = nullptr;
  decltype(&::ibv_get_device_name) getDeviceName = nullptr;
  decltype(&::ibv_open_device) openDevice = nullptr;
  decltype(&::ibv_close_device) closeDevice = nullptr;
  decltype(&::ibv_query_port) queryPortLegacy = nullptr;
  decltype(&::ibv_query_gid) queryGid = nullptr;
  decltype(&::ibv_alloc_pd) allocPd = nullptr;
  decltype(&::ibv_dealloc_pd) deallocPd = nullptr;
  decltype(&::ibv_reg_mr) regMr = nullptr;
  decltype(&::ibv_dereg_mr) deregMr = nullptr;
  decltype(&::ibv_create_comp_channel) createCompChannel = nullptr;
  decltype(&::ibv_destroy_comp_channel) destroyCompChannel = nullptr;
  decltype(&::ibv_create_cq) createCq = nullptr;
  decltype(&::ibv_destroy_cq) destroyCq = nullptr;
  decltype(&::ibv_get_cq_event) getCqEvent = nullptr;
  decltype(&::ibv_ack_cq_events) ackCqEvents = nullptr;
  decltype(&::ibv_create_qp) createQp = nullptr;
  decltype(&::ibv_modify_qp) modifyQp = nullptr;
  decltype(&::ibv_destroy_qp) destroyQp = nullptr;
  decltype(&::ibv_get_async_event) getAsyncEvent = nullptr;
  decltype(&::ibv_ack_async_event) ackAsyncEvent = nullptr;
  decltype(&::ibv_wc_status_str) wcStatusStr = nullptr;
  // Optional: null when the library does not export ibv_reg_dmabuf_mr@IBVERBS_1.12 (rdma-core
  // older than v34). Only dma-buf registration needs it (memory_region.h); the rail does not.
  decltype(&::ibv_reg_dmabuf_mr) regDmabufMr = nullptr;

 private:
  void* handle_ = nullptr;
};

}  // namespace nezha
