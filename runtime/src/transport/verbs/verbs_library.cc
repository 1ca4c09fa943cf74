#include "transport/verbs/verbs_library.h"

#include <dlfcn.h>

#include <cstring>

#include "base/error.h"

namespace nezha {

namespace {

template <typename Fn>
void bind(void* handle, Fn& fn, const char* name, const char* version, const std::string& rail) {
  // dlvsym with the version rdma-core exports as the default (objdump -T libibverbs.so.1).
  fn = reinterpret_cast<Fn>(dlvsym(handle, name, version));
  if (fn == nullptr) {
    throw ConfigError(strCat("rail ", rail, ": libibverbs.so.1 has no ", name, "@", version,
                             " (rdma-core too old or not rdma-core)"));
  }
}

}  // namespace

VerbsLibrary::VerbsLibrary(const std::string& rail) {
  handle_ = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    throw ConfigError(strCat("rail ", rail,
                             ": transport rdma needs libibverbs.so.1 from rdma-core in the "
                             "worker image (Debian/Ubuntu: libibverbs1 ibverbs-providers): ",
                             why != nullptr ? why : "not found"));
  }
  const char* v10 = "IBVERBS_1.0";
  const char* v11 = "IBVERBS_1.1";
  bind(handle_, getDeviceList, "ibv_get_device_list", v11, rail);
  bind(handle_, freeDeviceList, "ibv_free_device_list", v11, rail);
  bind(handle_, getDeviceName, "ibv_get_device_name", v11, rail);
  bind(handle_, openDevice, "ibv_open_device", v11, rail);
  bind(handle_, closeDevice, "ibv_close_device", v11, rail);
  bind(handle_, queryPortLegacy, "ibv_query_port", v11, rail);
  bind(handle_, queryGid, "ibv_query_gid", v11, rail);
  bind(handle_, allocPd, "ibv_alloc_pd", v11, rail);
  bind(handle_, deallocPd, "ibv_dealloc_pd", v11, rail);
  bind(handle_, regMr, "ibv_reg_mr", v11, rail);
  bind(handle_, deregMr, "ibv_dereg_mr", v11, rail);
  bind(handle_, createCompChannel, "ibv_create_comp_channel", v10, rail);
  bind(handle_, destroyCompChannel, "ibv_destroy_comp_channel", v10, rail);
  bind(handle_, createCq, "ibv_create_cq", v11, rail);
  bind(handle_, destroyCq, "ibv_destroy_cq", v11, rail);
  bind(handle_, getCqEvent, "ibv_get_cq_event", v11, rail);
  bind(handle_, ackCqEvents, "ibv_ack_cq_events", v11, rail);
  bind(handle_, createQp, "ibv_create_qp", v11, rail);
  bind(handle_, modifyQp, "ibv_modify_qp", v11, rail);
  bind(handle_, destroyQp, "ibv_destroy_qp", v11, rail);
  bind(handle_, getAsyncEvent, "ibv_get_async_event", v11, rail);
  bind(handle_, ackAsyncEvent, "ibv_ack_async_event", v11, rail);
  bind(handle_, wcStatusStr, "ibv_wc_status_str", v11, rail);
  // Not bound with bind(): its absence is an answer (no dma-buf registration), not an error.
  regDmabufMr = reinterpret_cast<decltype(regDmabufMr)>(
      dlvsym(handle_, "ibv_reg_dmabuf_mr", kRegDmabufMrVersion));
}

int VerbsLibrary::queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx != nullptr) return vctx->query_port(ctx, port, attr, sizeof *attr);
  std::memset(attr, 0, sizeof *attr);
  return queryPortLegacy(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

}  // namespace nezha
