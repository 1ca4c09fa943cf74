// RAII owners of the libibverbs objects one RDMA rail uses: the opened device (context), its
// protection domain, the completion channel and completion queue every queue pair of the rail
// shares, registered staging buffers and RC queue pairs. Destruction releases them in the order
// verbs requires (QPs and MRs before the CQ and PD, those before the context); the owners'
// declaration order in VerbsChannel keeps that order.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/verbs/discovery.h"
#include "transport/verbs/verbs_library.h"

namespace nezha {

// An opened HCA port: context, PD, completion channel + CQ, and what was queried of the port.
class VerbsDevice {
 public:
  // Opens `port.device` and checks that the port is active and that its GID at port.gidIndex
  // is the one discovery read from sysfs. Throws RailError(rail) naming the device.
  VerbsDevice(const RdmaPort& port, int cqDepth, int rail, const std::string& railName);
  // The same opened port and protection domain as `domain` (kept alive by this device), with a
  // completion channel and CQ of its own: memory registered in `domain` (memory_region.h) is
  // valid in this device's queue pairs. How the NCCL plugin's rails post from NCCL's registered
  // buffers (zero copy): every channel of a rail, rebuilt ones included, opens on the plugin's
  // device for that rail. Re-reads the port's attributes. Throws RailError(rail).
  VerbsDevice(std::shared_ptr<const VerbsDevice> domain, int cqDepth, int rail,
              const std::string& railName);
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  const VerbsLibrary& lib() const { return lib_; }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* channel() const { return channel_; }
  const RdmaPort& port() const { return port_; }
  const ibv_port_attr& portAttr() const { return attr_; }
  const ibv_gid& gid() const { return gid_; }
  bool roce() const { return attr_.link_layer == IBV_LINK_LAYER_ETHERNET; }
  // "mlx5_0 port 1", for messages.
  std::string where() const;
  // Opened over another device's domain: the context, and so its async events, are shared.
  bool sharesContext() const { return domain_ != nullptr; }

 private:
  void openCompletionQueue(int cqDepth);
  void release();
  [[noreturn]] void failWith(const std::string& what);
  VerbsLibrary lib_;
  std::shared_ptr<const VerbsDevice> domain_;  // the owner of ctx_ and pd_, when shared
  RdmaPort port_;
  int rail_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_port_attr attr_{};
  ibv_gid gid_{};
};

// Page-aligned host memory registered with the device for local writes and remote writes.
class RegisteredBuffer {
 public:
  RegisteredBuffer(const VerbsDevice& dev, size_t bytes, int rail);
  ~RegisteredBuffer();
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }

 private:
  const VerbsLibrary& lib_;
  size_t bytes_;
  char* data_ = nullptr;
  ibv_mr* mr_ = nullptr;
};

// What the peer needs to connect its RC queue pair to ours and to write into our receive ring.
// Sent as a fixed 52-byte little-endian record over the rail's authenticated TCP connection.
struct QpAddress {
  uint32_t qpn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  uint64_t ringAddr = 0;
  uint32_t ringKey = 0;
  uint32_t slots = 0;
  uint32_t slotBytes = 0;
  uint32_t psn = 0;
  uint32_t mtu = 0;  // enum ibv_mtu
  static constexpr size_t kWireBytes = 52;
  std::string encode() const;
  // Throws RailError(rail) naming `from` on a record of the wrong size or with absurd values.
  static QpAddress decode(const std::string& wire, int rail, const std::string& from);
};

// Direct placement (verbs_peer.h): a receiver's registered buffer for one receive, sent into the
// sender's staging ring as a fixed 20-byte little-endian record. The sender writes the receive's
// bytes straight to [addr, addr + len) with `rkey`.
struct DirectAdvert {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t rkey = 0;
  static constexpr size_t kWireBytes = 20;
  std::string encode() const;
  // Throws RailError(rail) naming `from` on a record of the wrong size, no bytes, or a range
  // that wraps around the address space.
  static DirectAdvert decode(const std::string& wire, int rail, const std::string& from);
};

// One reliable-connected queue pair on the device's shared CQ.
class QueuePair {
 public:
  QueuePair(const VerbsDevice& dev, int sendDepth, int recvDepth, int rail);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ibv_qp* get() const { return qp_; }
  uint32_t qpn() const { return qp_->qp_num; }
  // RESET -> INIT (remote write allowed).
  void toInit();
  // INIT -> RTR -> RTS, connected to `remote`.
  void connect(const QpAddress& local, const QpAddress& remote);
  // Any state -> ERR: outstanding work completes with flush errors, the peer's side fails. Safe
  // from any thread (verbs serializes modify_qp against posting).
  void toError();

 private:
  const VerbsDevice& dev_;
  int rail_;
  ibv_qp* qp_ = nullptr;
};

}  // namespace nezha
