// The NCCL network-plugin ABI, declared here from its public description (NVIDIA/nccl
// src/include/plugin/net/net_v*.h, the ext-net example) so the plugin builds without NCCL or
// CUDA headers. Only the versions libnccl-net-nezha.so exports are declared: v8 (NCCL
// 2.19-2.23, and what every plugin of that era exports), v11 (NCCL 2.28/2.29) and v12 (NCCL
// 2.30, which looks for v12 first, then v11).
//
// Layout matters more than names: NCCL reads these structs through its own headers, so member
// order and types must match the public headers exactly. tests/nccl/abi_test.cc pins every
// member's offset and every struct's size against the published member order.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

enum { NCCL_LOG_SUBSYS_INIT = 1, NCCL_LOG_SUBSYS_NET = 16 };

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* phandle,
                                               int64_t pluginId, void* extData);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_DEVS_PER_NIC 4

typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;

// ---- v8 ------------------------------------------------------------------------------------
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;  // Mbit/s
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

}  // extern "C"

// ---- v11 and v12 ---------------------------------------------------------------------------
// v12 (NCCL 2.30) is v11 with room for 8 merged devices per virtual NIC (4 in v11) and the
// NIC's rail and plane ids at the end of its properties; every call is the same. What they
// share is written once — templates over the structs that differ, a macro for the properties'
// common members — and the typedefs give the published names. (C++ only: templates cannot have
// C linkage, and this header is the plugin's own, not NCCL's.)
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;

template <int MaxDevs>
struct ncclNetVDevicePropsOf {
  int ndevs;
  int devs[MaxDevs];
};
typedef ncclNetVDevicePropsOf<NCCL_NET_MAX_DEVS_PER_NIC> ncclNetVDeviceProps_v11_t;
typedef ncclNetVDevicePropsOf<NCCL_NET_MAX_DEVS_PER_NIC_V12> ncclNetVDeviceProps_v12_t;

typedef struct {
  int trafficClass;  // -1 = undefined
} ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v12_t;

// The properties' members v11 and v12 share, in the published order.
#define NEZHA_NCCL_NET_VIRTUAL_PROPERTIES(VProps) \
  char* name;                                     \
  char* pciPath;                                  \
  uint64_t guid;                                  \
  int ptrSupport;                                 \
  int regIsGlobal;                                \
  int forceFlush;                                 \
  int speed;                                      \
  int port;                                       \
  float latency;                                  \
  int maxComms;                                   \
  int maxRecvs;                                   \
  ncclNetDeviceType netDeviceType;                \
  int netDeviceVersion;                           \
  VProps vProps;                                  \
  size_t maxP2pBytes;                             \
  size_t maxCollBytes;                            \
  int maxMultiRequestSize

typedef struct {
  NEZHA_NCCL_NET_VIRTUAL_PROPERTIES(ncclNetVDeviceProps_v11_t);
} ncclNetProperties_v11_t;

typedef struct {
  NEZHA_NCCL_NET_VIRTUAL_PROPERTIES(ncclNetVDeviceProps_v12_t);
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

template <typename CommConfig, typename Properties, typename VDeviceProps>
struct ncclNetVirtualOf {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, CommConfig* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, Properties* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
};
typedef ncclNetVirtualOf<ncclNetCommConfig_v11_t, ncclNetProperties_v11_t,
                         ncclNetVDeviceProps_v11_t>
    ncclNet_v11_t;
typedef ncclNetVirtualOf<ncclNetCommConfig_v12_t, ncclNetProperties_v12_t,
                         ncclNetVDeviceProps_v12_t>
    ncclNet_v12_t;
