// libnccl-net-nezha.so: the entry points NCCL's proxy calls, for ABI v8 and v11.
//
// Nezha presents ONE virtual NCCL device with every rail behind it. That choice decides who
// owns the split: with one device per rail NCCL would spread channels over rails by its static
// topology rules and, when a rail died, fail the channels on it; with one device Nezha stripes
// every connection by measured speed, moves a failed rail's bytes to the others inside the
// request and brings the rail back, while NCCL sees one NIC whose speed is the sum.
//
// Process-wide state: NCCL's v8 init() takes no context, so the plugin keeps one PluginContext
// per process (created by the first init, never reconfigured). Everything else hangs off the
// comm objects NCCL passes back.
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "base/error.h"
#include "nccl/net_abi.h"
#include "nccl/plugin_context.h"
#include "nccl/recv_comm.h"
#include "nccl/send_comm.h"

#define NEZHA_EXPORT extern "C" __attribute__((visibility("default")))

namespace nezha::ncclnet {
namespace {

std::mutex gInitMu;
std::unique_ptr<PluginContext> gContext;  // see the comment at the top

struct Request {
  SendComm* send = nullptr;
  SendRequest* sreq = nullptr;
  RecvComm* recv = nullptr;
  RecvRequest* rreq = nullptr;
  int count = 1;  // receives in the group (sizes[] has this many entries)
};

// Every entry point runs inside this: errors become NCCL result codes with a WARN naming them.
template <typename F>
ncclResult_t guarded(const char* call, F&& f) {
  try {
    return f();
  } catch (const CommError& e) {
    if (gContext) gContext->warn(strCat(call, ": ", e.what()));
    return e.code;
  } catch (const ConfigError& e) {
    if (gContext)
      gContext->warn(strCat(call, ": ", e.what()));
    else
      std::fprintf(stderr, "NET/Nezha : %s: %s\n", call, e.what());
    return ncclInvalidUsage;
  } catch (const std::bad_alloc&) {
    return ncclSystemError;
  } catch (const std::exception& e) {
    if (gContext) gContext->warn(strCat(call, ": internal error: ", e.what()));
    return ncclInternalError;
  }
}

ncclResult_t initCommon(ncclDebugLogger_t logger) {
  std::lock_guard<std::mutex> lock(gInitMu);
  if (gContext) return ncclSuccess;
  try {
    auto ctx = std::make_unique<PluginContext>(PluginConfig::fromEnv(), logger);
    ctx->startControl();
    gContext = std::move(ctx);
  } catch (const std::exception& e) {
    // NCCL falls back to its own transports when a plugin's init fails; say so loudly, and
    // name NCCL_NET=nezha as the way to make that fatal instead (the operator sets it).
    const std::string msg = strCat("cannot start: ", e.what(),
                                   " (NCCL will use its own transports unless NCCL_NET=nezha)");
    if (logger != nullptr)
      logger(NCCL_LOG_WARN, NCCL_LOG_SUBSYS_INIT, __FILE__, __LINE__, "NET/Nezha : %s",
             msg.c_str());
    else
      std::fprintf(stderr, "NET/Nezha : %s\n", msg.c_str());
    return ncclInvalidUsage;
  }
  std::string rails;
  for (const auto& r : gContext->config().rails)
    rails += strCat(rails.empty() ? "" : " ", r.name, "=", r.iface, "/", r.ip);
  gContext->info(
      strCat("using rails ", rails, " as one device, chunk ", gContext->config().chunkBytes, " B"));
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}

// Shared by the v8 and v11 property structs.
template <typename P>
void fillCommon(P* props) {
  static char name[] = "nezha";
  const auto& cfg = gContext->config();
  uint64_t mbps = 0;
  for (const auto& r : cfg.rails) mbps += r.expectedMbps > 0 ? r.expectedMbps : 10000;
  props->name = name;
  props->pciPath = nullptr;       // a virtual device: NCCL places it at the CPU
  props->guid = 0x6e657a6861ull;  // "nezha"
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->speed = static_cast<int>(std::min<uint64_t>(mbps, INT_MAX));
  props->port = 1;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = static_cast<int>(kMaxGrouped);
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
}

ncclResult_t getPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  if (dev != 0 || !gContext) return ncclInvalidArgument;
  fillCommon(props);
  return ncclSuccess;
}

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  if (dev != 0 || !gContext) return ncclInvalidArgument;
  std::memset(props, 0, sizeof *props);
  fillCommon(props);
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = 0;
  props->maxP2pBytes = size_t(1) << 31;
  props->maxCollBytes = size_t(1) << 31;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t listen(int dev, void* handle, void** listenComm) {
  return guarded("listen", [&] {
    if (dev != 0)
      throw CommError(ncclInvalidArgument, strCat("device ", dev, " (there is only 0)"));
    auto comm = std::make_unique<ListenComm>(*gContext);
    encodeHandle(comm->handle(), handle);
    *listenComm = comm.release();
    return ncclSuccess;
  });
}

ncclResult_t connect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  auto* scratch = static_cast<uint8_t*>(handle) + kHandleScratchOffset;
  SendComm* comm = nullptr;
  std::memcpy(&comm, scratch, sizeof comm);
  const ncclResult_t rc = guarded("connect", [&] {
    if (dev != 0)
      throw CommError(ncclInvalidArgument, strCat("device ", dev, " (there is only 0)"));
    if (comm == nullptr) {
      comm = new SendComm(*gContext, decodeHandle(handle));
      std::memcpy(scratch, &comm, sizeof comm);
    }
    if (comm->connected()) {
      *sendComm = comm;
      std::memset(scratch, 0, sizeof comm);
    }
    return ncclSuccess;
  });
  if (rc != ncclSuccess && comm != nullptr) {
    delete comm;
    std::memset(scratch, 0, sizeof comm);
  }
  return rc;
}

ncclResult_t accept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  return guarded("accept", [&] {
    auto comm = static_cast<ListenComm*>(listenComm)->accept();
    *recvComm = comm.release();
    return ncclSuccess;
  });
}

ncclResult_t regMr(void*, void* data, size_t, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) {
    if (gContext) {
      gContext->warn(
          "GPU memory registration asked for, but this build moves host memory only "
          "(GPUDirect RDMA comes with the verbs transport; see docs/nccl.md)");
    }
    return ncclInternalError;
  }
  *mhandle = data == nullptr ? reinterpret_cast<void*>(1) : data;  // host memory needs no pinning
  return ncclSuccess;
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int,
                         void** mhandle) {
  return regMr(comm, data, size, type, mhandle);
}

ncclResult_t deregMr(void*, void*) { return ncclSuccess; }

ncclResult_t isend(void* sendComm, void* data, uint64_t size, int tag, void** request) {
  *request = nullptr;
  return guarded("isend", [&] {
    auto* comm = static_cast<SendComm*>(sendComm);
    SendRequest* r = comm->isend(data, size, tag);
    if (r != nullptr) *request = new Request{comm, r, nullptr, nullptr, 1};
    return ncclSuccess;
  });
}

ncclResult_t irecv(void* recvComm, int n, void** data, const uint64_t* sizes, int* tags,
                   void** request) {
  *request = nullptr;
  return guarded("irecv", [&] {
    auto* comm = static_cast<RecvComm*>(recvComm);
    RecvRequest* r = comm->irecv(n, data, sizes, tags);
    *request = new Request{nullptr, nullptr, comm, r, n};
    return ncclSuccess;
  });
}

ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory: nothing to make visible to a GPU
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  *done = 0;
  if (request == nullptr) return ncclInvalidArgument;
  auto* req = static_cast<Request*>(request);
  return guarded("test", [&] {
    if (req->send != nullptr) {
      uint64_t size = 0;
      if (req->send->test(req->sreq, &size)) {
        *done = 1;
        if (sizes != nullptr) sizes[0] = static_cast<int>(size);
        delete req;
      }
    } else if (req->recv->test(req->rreq, sizes)) {
      *done = 1;
      delete req;
    }
    return ncclSuccess;
  });
}

ncclResult_t closeSend(void* comm) {
  delete static_cast<SendComm*>(comm);
  return ncclSuccess;
}
ncclResult_t closeRecv(void* comm) {
  delete static_cast<RecvComm*>(comm);
  return ncclSuccess;
}
ncclResult_t closeListen(void* comm) {
  delete static_cast<ListenComm*>(comm);
  return ncclSuccess;
}
ncclResult_t getDeviceMr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return ncclSuccess;
}
ncclResult_t irecvConsumed(void*, int, void*) { return ncclSuccess; }

// ---- v8 adapters -----------------------------------------------------------------------------
ncclResult_t initV8(ncclDebugLogger_t logger) { return initCommon(logger); }
ncclResult_t connectV8(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** devComm) {
  if (devComm != nullptr) *devComm = nullptr;  // no device offload
  return connect(dev, handle, sendComm);
}
ncclResult_t acceptV8(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** devComm) {
  if (devComm != nullptr) *devComm = nullptr;
  return accept(listenComm, recvComm);
}
ncclResult_t isendV8(void* comm, void* data, int size, int tag, void*, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return isend(comm, data, static_cast<uint64_t>(size), tag, request);
}
ncclResult_t irecvV8(void* comm, int n, void** data, int* sizes, int* tags, void**,
                     void** request) {
  if (n < 1 || n > int(kMaxGrouped)) return ncclInvalidArgument;
  uint64_t s[kMaxGrouped];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    s[i] = static_cast<uint64_t>(sizes[i]);
  }
  return irecv(comm, n, data, s, tags, request);
}

// ---- v11 adapters ----------------------------------------------------------------------------
ncclResult_t initV11(void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t) {
  const ncclResult_t rc = initCommon(logger);
  if (ctx != nullptr) *ctx = gContext.get();
  return rc;
}
ncclResult_t listenV11(void*, int dev, void* handle, void** listenComm) {
  return listen(dev, handle, listenComm);
}
ncclResult_t connectV11(void*, int dev, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm != nullptr) *devComm = nullptr;
  return connect(dev, handle, sendComm);
}
ncclResult_t isendV11(void* comm, void* data, size_t size, int tag, void*, void*, void** request) {
  return isend(comm, data, size, tag, request);
}
ncclResult_t irecvV11(void* comm, int n, void** data, size_t* sizes, int* tags, void**, void**,
                      void** request) {
  if (n < 1 || n > int(kMaxGrouped)) return ncclInvalidArgument;
  uint64_t s[kMaxGrouped];
  for (int i = 0; i < n; ++i) s[i] = sizes[i];
  return irecv(comm, n, data, s, tags, request);
}
ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  // The rails are already one device; NCCL may only ask to merge that one device with itself.
  if (props == nullptr || props->ndevs != 1 || props->devs[0] != 0) return ncclInvalidUsage;
  *d = 0;
  return ncclSuccess;
}
ncclResult_t finalize(void*) { return ncclSuccess; }
ncclResult_t setNetAttr(void*, ncclNetAttr_v11_t*) { return ncclSuccess; }

}  // namespace
}  // namespace nezha::ncclnet

using namespace nezha::ncclnet;  // NOLINT: the exported tables below name the adapters

NEZHA_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    "nezha",   initV8,      devices,     getPropertiesV8, listen,        connectV8, acceptV8,
    regMr,     regMrDmaBuf, deregMr,     isendV8,         irecvV8,       iflush,    test,
    closeSend, closeRecv,   closeListen, getDeviceMr,     irecvConsumed,
};

NEZHA_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    "nezha",       initV11,     devices,     getPropertiesV11, listenV11,   connectV11,
    acceptV8,      regMr,       regMrDmaBuf, deregMr,          isendV11,    irecvV11,
    iflush,        test,        closeSend,   closeRecv,        closeListen, getDeviceMr,
    irecvConsumed, makeVDevice, finalize,    setNetAttr,
};

// For the harness and tests: this process's per-rail counters as JSON. Returns the length the
// JSON needs; writes it (NUL-terminated, truncated to len) when buf is non-null.
NEZHA_EXPORT int nezhaNcclStats(char* buf, int len) {
  if (!gContext) return -1;
  const std::string json = gContext->statsJson();
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(json.size(), static_cast<size_t>(len - 1));
    std::memcpy(buf, json.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(json.size());
}
