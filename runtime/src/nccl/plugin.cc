// libnccl-net-nezha.so: the entry points NCCL's proxy calls, for ABI v8, v11 and v12.
//
// Nezha presents ONE virtual NCCL device with every rail behind it. That choice decides who
// owns the split: with one device per rail NCCL would spread channels over rails by its static
// topology rules and, when a rail died, fail the channels on it; with one device Nezha stripes
// every connection by measured speed, moves a failed rail's bytes to the others inside the
// request and brings the rail back, while NCCL sees one NIC whose speed is the sum.
//
// The plugin is an adapter: each NCCL connection is a two-rank job of the runtime's failover
// engine (nccl/engine_link.h), set up off NCCL's proxy thread (nccl/pending_link.h). isend and
// irecv post a message, test polls it; none of them waits on the network.
//
// Process-wide state: NCCL's v8 init() takes no context, so the plugin keeps one PluginContext
// per process (created by the first init, never reconfigured). Everything else hangs off the
// comm objects NCCL passes back, each looked up among the live ones before it is used
// (nccl/live_set.h), so misuse is an error code and never a crash.
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "base/error.h"
#include "nccl/comm_error.h"
#include "nccl/engine_link.h"
#include "nccl/gpu_memory.h"
#include "nccl/handle.h"
#include "nccl/live_set.h"
#include "nccl/net_abi.h"
#include "nccl/pending_link.h"
#include "nccl/plugin_context.h"

#define NEZHA_EXPORT extern "C" __attribute__((visibility("default")))

namespace nezha::ncclnet {
namespace {

std::mutex gInitMu;
std::unique_ptr<PluginContext> gContext;  // see the comment at the top
// What NCCL's buffers may be and where its registrations live (nccl/gpu_memory.h); made with
// gContext and, like it, never replaced.
std::unique_ptr<GpuMemory> gMemory;

// A listen comm: its connection's set-up, started by listen() (the rails' listeners are open).
struct ListenComm {
  std::unique_ptr<PendingLink> pending;
};
// A send or recv comm: one end of a connection.
struct LinkComm {
  std::unique_ptr<EngineLink> link;
  explicit LinkComm(std::unique_ptr<EngineLink> l) : link(std::move(l)) {
    gContext->attach(link.get());
  }
  ~LinkComm() { gContext->detach(link.get()); }
};
struct Request {
  LinkComm* comm = nullptr;
  uint64_t id = 0;  // the message's id on the comm's link
};

LiveSet<ListenComm> gListens;
LiveSet<PendingLink> gConnecting;  // named by a connect handle's scratch until connected
LiveSet<LinkComm> gSends;
LiveSet<LinkComm> gRecvs;
LiveSet<Request> gRequests;
LiveSet<Registration> gRegistrations;  // regMr's handles, until deregMr

template <typename T>
T* live(const LiveSet<T>& set, void* p, const char* what) {
  T* found = set.find(p);
  if (found == nullptr) {
    throw CommError(ncclInvalidArgument,
                    strCat(what, " ", p, " is not one this plugin has open (closed already?)"));
  }
  return found;
}

// Every entry point runs inside this: errors become NCCL result codes with a WARN naming them.
template <typename F>
ncclResult_t guarded(const char* call, F&& f) {
  try {
    return f();
  } catch (const CommError& e) {
    if (gContext) gContext->warn(strCat(call, ": ", e.what()));
    return e.code;
  } catch (const FrameError& e) {  // a connect handle that is not ours (nccl/handle.h)
    if (gContext) gContext->warn(strCat(call, ": ", e.what()));
    return ncclInvalidArgument;
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
    auto memory = std::make_unique<GpuMemory>(ctx->config().engine);
    ctx->startControl();
    ctx->startLinkWatch();
    gContext = std::move(ctx);
    gMemory = std::move(memory);
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
  // Whether NCCL hands the plugin its GPU buffers or host memory it staged (docs/nccl.md "GPU
  // memory"), and why: an operator reading NCCL's log needs to know.
  gContext->info(strCat("using rails ", rails, " as one device on the runtime's failover engine, ",
                        gMemory->path().describe()));
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
  props->ptrSupport = gMemory->path().ptrSupport();
  props->regIsGlobal = 0;
  props->speed = static_cast<int>(std::min<uint64_t>(mbps, INT_MAX));
  props->port = 1;
  props->latency = 0;
  props->maxComms = 65536;
  // One receive per irecv, as NCCL's socket transport: a connection's messages are matched in
  // posting order (nccl/engine_link.h), and NCCL groups receives only up to this.
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
}

ncclResult_t getPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  if (dev != 0 || !gContext) return ncclInvalidArgument;
  fillCommon(props);
  return ncclSuccess;
}

// Shared by the v11 and v12 property structs (v12 adds the rail and plane ids).
template <typename P>
ncclResult_t getPropertiesVirtual(int dev, P* props) {
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

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  return getPropertiesVirtual(dev, props);
}

ncclResult_t getPropertiesV12(int dev, ncclNetProperties_v12_t* props) {
  const ncclResult_t rc = getPropertiesVirtual(dev, props);
  if (rc == ncclSuccess) {
    // One device with every rail behind it: it belongs to no single rail or plane.
    props->railId = -1;
    props->planeId = -1;
  }
  return rc;
}

ncclResult_t listen(int dev, void* handle, void** listenComm) {
  return guarded("listen", [&] {
    if (dev != 0)
      throw CommError(ncclInvalidArgument, strCat("device ", dev, " (there is only 0)"));
    auto comm = std::make_unique<ListenComm>();
    ConnectHandle h;
    comm->pending = PendingLink::listen(
        gContext->config().engine, gContext->config().connectTimeout, h, gMemory->linkMemory());
    encodeHandle(h, handle);
    gListens.add(comm.get());
    *listenComm = comm.release();
    return ncclSuccess;
  });
}

ncclResult_t connect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  auto* scratch = static_cast<uint8_t*>(handle) + kHandleScratchOffset;
  PendingLink* comm = nullptr;
  const ncclResult_t rc = guarded("connect", [&] {
    if (dev != 0)
      throw CommError(ncclInvalidArgument, strCat("device ", dev, " (there is only 0)"));
    // The magic first: nothing stored in a handle is trusted before it is known to be ours.
    const ConnectHandle peer = decodeHandle(handle);
    void* stored = nullptr;
    std::memcpy(&stored, scratch, sizeof stored);
    if (stored != nullptr) {
      comm = gConnecting.find(stored);
      if (comm == nullptr)
        throw FrameError("connect handle: its scratch names no connection of this process");
    } else {
      comm = PendingLink::connect(gContext->config().engine, gContext->config().connectTimeout,
                                  peer, gMemory->linkMemory())
                 .release();
      gConnecting.add(comm);
      std::memcpy(scratch, &comm, sizeof comm);
    }
    if (std::unique_ptr<EngineLink> link = comm->take()) {
      auto* send = new LinkComm(std::move(link));
      gSends.add(send);
      *sendComm = send;
      gConnecting.remove(comm);
      delete comm;
      comm = nullptr;
      std::memset(scratch, 0, sizeof comm);
    }
    return ncclSuccess;
  });
  if (rc != ncclSuccess && comm != nullptr && gConnecting.remove(comm)) {
    delete comm;
    std::memset(scratch, 0, sizeof comm);
  }
  return rc;
}

ncclResult_t accept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  return guarded("accept", [&] {
    ListenComm* listen = live(gListens, listenComm, "listen comm");
    if (!listen->pending) {
      throw CommError(ncclInvalidUsage,
                      "accept: this listen comm's connection was accepted already");
    }
    std::unique_ptr<EngineLink> link = listen->pending->take();
    if (link == nullptr) return ncclSuccess;  // still being set up: NCCL calls again
    listen->pending.reset();
    auto* recv = new LinkComm(std::move(link));
    gRecvs.add(recv);
    *recvComm = recv;
    return ncclSuccess;
  });
}

// GPU memory only when the plugin said it takes it (ptrSupport); NCCL then registers its GPU
// buffers, otherwise only the host buffers it stages through.
void requireMemoryType(int type) {
  if (type == NCCL_PTR_HOST || (type == NCCL_PTR_CUDA && gMemory->path().zeroCopy)) return;
  throw CommError(ncclInternalError,
                  strCat("registration of ", type == NCCL_PTR_CUDA ? "GPU" : "unknown",
                         " memory (type ", type, ") asked for, but the plugin is ",
                         gMemory->path().describe(), " (docs/nccl.md \"GPU memory\")"));
}

// The registration's errors as NCCL result codes; the handle NCCL keeps until deregMr.
template <typename F>
ncclResult_t registerWith(const char* call, void** mhandle, F&& makeRegistration) {
  *mhandle = nullptr;
  return guarded(call, [&] {
    if (!gMemory) throw CommError(ncclInvalidUsage, "called before init");
    std::unique_ptr<Registration> reg;
    try {
      reg = makeRegistration();
    } catch (const InvalidArgument& e) {
      throw CommError(ncclInvalidArgument, e.what());
    } catch (const RailError& e) {
      throw CommError(ncclSystemError, e.what());
    }
    gRegistrations.add(reg.get());
    *mhandle = reg.release();
    return ncclSuccess;
  });
}

// ibv_reg_mr of the buffer on every rdma rail (none on tcp rails).
ncclResult_t regMr(void*, void* data, size_t size, int type, void** mhandle) {
  return registerWith("regMr", mhandle, [&] {
    requireMemoryType(type);
    return gMemory->registerPointer(data, size);
  });
}

// ibv_reg_dmabuf_mr of the dma-buf on every rdma rail. NCCL passes a dma-buf only when
// ptrSupport has NCCL_PTR_DMABUF; host memory without one registers as in regMr.
ncclResult_t regMrDmaBuf(void*, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle) {
  return registerWith("regMrDmaBuf", mhandle, [&] {
    requireMemoryType(type);
    if (type == NCCL_PTR_HOST && fd < 0) return gMemory->registerPointer(data, size);
    return gMemory->registerDmabuf(data, size, offset, fd);
  });
}

ncclResult_t deregMr(void*, void* mhandle) {
  return guarded("deregMr", [&] {
    Registration* reg = live(gRegistrations, mhandle, "memory handle");
    gRegistrations.remove(reg);
    delete reg;  // releases its memory regions
    return ncclSuccess;
  });
}

// The registration behind NCCL's mhandle when the plugin is zero-copy (the message then moves
// from it, never through the CPU); null when host-staged, where the data path copies anyway.
const Registration* registrationFor(void* mhandle) {
  if (!gMemory->path().zeroCopy || mhandle == nullptr) return nullptr;
  return live(gRegistrations, mhandle, "memory handle");
}

ncclResult_t isend(void* sendComm, void* data, uint64_t size, int tag, void* mhandle,
                   void** request) {
  *request = nullptr;
  return guarded("isend", [&] {
    // Tags are not used: a connection's messages match in posting order.
    (void)tag;
    LinkComm* comm = live(gSends, sendComm, "send comm");
    auto* req = new Request{comm, comm->link->post(data, size, registrationFor(mhandle))};
    gRequests.add(req);
    *request = req;
    return ncclSuccess;
  });
}

ncclResult_t irecv(void* recvComm, int n, void** data, const uint64_t* sizes, int* tags,
                   void** mhandles, void** request) {
  *request = nullptr;
  return guarded("irecv", [&] {
    (void)tags;
    LinkComm* comm = live(gRecvs, recvComm, "recv comm");
    if (n != 1) {
      throw CommError(ncclInvalidArgument,
                      strCat("irecv of ", n, " grouped receives (the plugin reports maxRecvs 1)"));
    }
    const Registration* reg = registrationFor(mhandles != nullptr ? mhandles[0] : nullptr);
    auto* req = new Request{comm, comm->link->post(data[0], sizes[0], reg)};
    gRequests.add(req);
    *request = req;
    return ncclSuccess;
  });
}

// A flush makes a GPU receive's bytes visible to the GPU's kernels. NCCL asks for one only for
// receives into GPU memory (GPUDirect) where the HCA's PCIe writes may still be on their way when
// the receive completes: GPUs before Hopper, C2C platforms, NCCL_NET_FORCE_FLUSH (NCCL's
// topology decides). Its IB transport then does an RDMA read of the buffer over a loopback queue
// pair. That read is not built here (docs/nccl.md "GPU memory"), so such a flush fails loudly,
// naming the way out, instead of handing NCCL a buffer whose bytes may not all have landed.
// Host-staged, NCCL never asks; a flush of nothing is done at once (a null request).
ncclResult_t iflush(void* recvComm, int n, void**, int* sizes, void**, void** request) {
  *request = nullptr;
  return guarded("iflush", [&] {
    (void)live(gRecvs, recvComm, "recv comm");
    bool bytes = false;
    for (int i = 0; i < n && sizes != nullptr; ++i) bytes = bytes || sizes[i] > 0;
    if (!bytes || !gMemory->path().zeroCopy) return ncclSuccess;
    throw CommError(ncclInternalError,
                    "NCCL asks to flush a receive into GPU memory (GPUs before Hopper, C2C "
                    "platforms or NCCL_NET_FORCE_FLUSH need it), and the plugin does not "
                    "implement the RDMA-read flush, so it cannot promise the bytes have landed; "
                    "set NCCL_NET_GDR_LEVEL=LOC to run host-staged (docs/nccl.md \"GPU memory\")");
  });
}

ncclResult_t test(void* request, int* done, int* sizes) {
  *done = 0;
  return guarded("test", [&] {
    Request* req = live(gRequests, request, "request");
    uint64_t size = 0;
    bool finished = false;
    try {
      finished = req->comm->link->test(req->id, &size);
    } catch (const CommError&) {
      gRequests.remove(req);  // the link forgot the message: so does the plugin
      delete req;
      throw;
    }
    if (finished) {
      if (sizes != nullptr) sizes[0] = static_cast<int>(size);
      *done = 1;
      gRequests.remove(req);
      delete req;
    }
    return ncclSuccess;
  });
}

// A comm's requests go with it: NCCL may not test them afterwards (test() then finds none).
ncclResult_t closeComm(LiveSet<LinkComm>& set, void* comm, const char* call) {
  return guarded(call, [&] {
    LinkComm* c = live(set, comm, call);
    set.remove(c);
    gRequests.eraseIf([&](const Request& r) { return r.comm == c; }, [](Request* r) { delete r; });
    delete c;
    return ncclSuccess;
  });
}

ncclResult_t closeSend(void* comm) { return closeComm(gSends, comm, "closeSend"); }
ncclResult_t closeRecv(void* comm) { return closeComm(gRecvs, comm, "closeRecv"); }
ncclResult_t closeListen(void* comm) {
  return guarded("closeListen", [&] {
    ListenComm* c = live(gListens, comm, "listen comm");
    gListens.remove(c);
    delete c;
    return ncclSuccess;
  });
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
ncclResult_t isendV8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return isend(comm, data, static_cast<uint64_t>(size), tag, mhandle, request);
}
ncclResult_t irecvV8(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                     void** request) {
  if (n != 1 || sizes[0] < 0) return ncclInvalidArgument;  // maxRecvs is 1
  const uint64_t size = static_cast<uint64_t>(sizes[0]);
  return irecv(comm, n, data, &size, tags, mhandles, request);
}

// ---- v11 adapters ----------------------------------------------------------------------------
template <typename Config>
ncclResult_t initWithContext(void** ctx, uint64_t, Config*, ncclDebugLogger_t logger,
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
ncclResult_t isendV11(void* comm, void* data, size_t size, int tag, void* mhandle, void*,
                      void** request) {
  return isend(comm, data, size, tag, mhandle, request);
}
ncclResult_t irecvV11(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void**, void** request) {
  if (n != 1) return ncclInvalidArgument;  // maxRecvs is 1
  const uint64_t size = sizes[0];
  return irecv(comm, n, data, &size, tags, mhandles, request);
}
// The rails are already one device; NCCL may only ask to merge that one device with itself.
template <typename VProps>
ncclResult_t makeVDevice(int* d, VProps* props) {
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

// v11 and v12 (NCCL 2.30, looked up first) share every call; only the property and
// virtual-device structs differ.
namespace {
template <typename Table, typename Config, typename VProps, typename Props>
constexpr Table virtualTable(ncclResult_t (*getProperties)(int, Props*)) {
  return Table{"nezha",       initWithContext<Config>,
               devices,       getProperties,
               listenV11,     connectV11,
               acceptV8,      regMr,
               regMrDmaBuf,   deregMr,
               isendV11,      irecvV11,
               iflush,        test,
               closeSend,     closeRecv,
               closeListen,   getDeviceMr,
               irecvConsumed, makeVDevice<VProps>,
               finalize,      setNetAttr};
}
}  // namespace

NEZHA_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 =
    virtualTable<ncclNet_v11_t, ncclNetCommConfig_v11_t, ncclNetVDeviceProps_v11_t>(
        getPropertiesV11);
NEZHA_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 =
    virtualTable<ncclNet_v12_t, ncclNetCommConfig_v12_t, ncclNetVDeviceProps_v12_t>(
        getPropertiesV12);

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
