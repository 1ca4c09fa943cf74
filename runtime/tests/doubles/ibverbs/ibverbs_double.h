// libibverbs test double (libibverbs.so.1, loaded only by tests via LD_LIBRARY_PATH): the
// subset of the verbs API the RDMA rail uses, with the real rdma-core ABI (structs from the
// real <infiniband/verbs.h>, the same versioned symbols, post_send/post_recv/poll_cq/
// req_notify_cq through context->ops), so the runtime's verbs code runs unchanged.
//
// Devices: one fake HCA per directory under $NEZHA_RDMA_SYSFS_ROOT/class/infiniband (the same
// fixture tree the runtime's discovery reads; tests write it, one device per rail interface).
// Port 1, RoCE (link layer Ethernet), GIDs from ports/1/gids/<i>, netdev from
// gid_attrs/ndevs/<i>. Port state = the netdev's carrier.
//
// Wire: an RC queue pair is one TCP connection between the two GIDs' IPv4 addresses, bound to
// the rail's interface, so its bytes cross the test bed's real rail. QPN = the QP's listening
// port. The side with the lower (IP, QPN) dials at RTR. RDMA write with immediate = a frame
// (header + payload) that the responder writes into the registered memory named by the rkey,
// then completes a posted receive with the immediate; each frame is acknowledged and the
// requester's completion comes with the ACK, as on a real RC QP.
//
// Memory regions: ibv_reg_mr registers host memory as it is; ibv_reg_dmabuf_mr (rdma-core's
// IBVERBS_1.12 call, for GPU memory exported as a dma-buf) maps the fd itself (any mmap-able fd:
// tests use a memfd standing in for the GPU's dma-buf) and from then on reads and writes that
// mapping, translating the MR's iova (the address work requests name) to it. A kernel or driver
// without dma-buf support is played with NEZHA_IBV_DOUBLE_DMABUF=unsupported (EOPNOTSUPP).
//
// Failures, as the hardware shows them: the interface losing carrier → IBV_EVENT_PORT_ERR on
// the async fd and every QP of the device to error (outstanding work completes with
// IBV_WC_RETRY_EXC_ERR, then flush errors); the connection lost or the peer's QP in error →
// the same on this QP; a black hole (packets dropped, link up) stops ACKs and writes, so
// completions simply stop coming.
#pragma once

#include <infiniband/verbs.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ibvdouble {

struct Device {
  ibv_device dev;  // first: ibv_device* == Device*
  std::string root, name, iface;
  std::vector<std::string> gids;  // sysfs text, index = GID index
  uint32_t ipv4 = 0;              // network order, from the first IPv4-mapped GID
};

struct Qp;

struct Mr {
  ibv_mr mr{};  // first: ibv_mr* == Mr*
  int access = 0;
  uint64_t iova = 0;        // the address work requests use for byte 0 of the region
  char* host = nullptr;     // where byte 0 is in this process
  void* mapping = nullptr;  // dma-buf regions: the double's own mapping, unmapped at dereg
  size_t mappingBytes = 0;
};

struct Context {
  ibv_context ctx;  // first
  Device* device = nullptr;
  int asyncWrite = -1;  // the async fd is the read end of a pipe
  // Lock order: mu, then a QP's mu, then a CQ's mu. mrMu is a leaf.
  std::mutex mu;
  std::deque<ibv_async_event> events;
  std::vector<Qp*> qps;
  std::mutex mrMu;
  std::map<uint32_t, Mr*> mrs;  // key -> MR (lkey == rkey)
  uint32_t nextKey = 0x100;
  bool portUp = true;
  int watchWake = -1;  // eventfd stopping the link watch
  std::thread watch;
  void pushEvent(const ibv_async_event& ev);
  // Where [addr, addr+len) of the MR with `key` is in this process, if it lies inside that MR,
  // the MR is in the queue pair's protection domain `pd` (as on an HCA: a key of another domain
  // is an access error) and allows `access` (0: any); nullptr otherwise.
  char* hostAddress(const ibv_pd* pd, uint32_t key, uint64_t addr, uint64_t len, int access);
  Mr* addMr(ibv_pd* pd, uint64_t iova, size_t length, int access, char* host);
};

struct Channel {
  ibv_comp_channel ch;  // first
  int writeFd = -1;
};

struct Cq {
  ibv_cq cq;  // first
  std::mutex mu;
  std::deque<ibv_wc> entries;
  bool armed = false;
  void push(const ibv_wc& wc);
};

struct SendWr {
  uint64_t wrId;
  ibv_wr_opcode opcode;
  uint32_t imm;        // network order, as posted
  uint64_t localAddr;  // where the bytes are in this process (translated from the MR at post)
  uint32_t len;
  uint64_t remoteAddr;
  uint32_t rkey;
  bool signaled;
};

struct Qp {
  ibv_qp qp;  // first
  Context* ctx = nullptr;
  uint32_t maxSend = 0, maxRecv = 0;
  bool sigAll = false;
  std::mutex mu;
  std::condition_variable cv;
  ibv_qp_state state = IBV_QPS_RESET;
  bool destroying = false;
  int listenFd = -1;
  int sock = -1;
  int wake = -1;  // eventfd: stops connect/accept waits
  uint32_t remoteIp = 0, remoteQpn = 0;
  std::deque<SendWr> toSend;   // posted, not yet on the wire
  std::deque<SendWr> unacked;  // on the wire, waiting for the ACK
  std::deque<uint64_t> recvs;  // posted receive wr_ids
  int acksOwed = 0;
  std::thread worker, sender;
  // Moves the QP to ERR: the first outstanding send completes with `first`, the rest and every
  // receive with IBV_WC_WR_FLUSH_ERR; the connection is shut so the peer's QP fails too.
  void toError(ibv_wc_status first);  // caller holds mu
};

// The sysfs tree the double reads ($NEZHA_RDMA_SYSFS_ROOT, default /sys).
std::string sysfsRoot();
std::string readLine(const std::string& path);
void registerQp(Context* c, Qp* q);
void unregisterQp(Context* c, Qp* q);
void startLinkWatch(Context* c);
void stopLinkWatch(Context* c);
bool interfaceUp(const std::string& iface);

// Ops installed in every context.
int pollCq(ibv_cq* cq, int n, ibv_wc* wc);
int reqNotifyCq(ibv_cq* cq, int solicitedOnly);
int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);

}  // namespace ibvdouble
