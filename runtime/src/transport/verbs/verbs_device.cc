#include "transport/verbs/verbs_device.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/wire.h"

namespace nezha {

namespace {

std::string gidText(const ibv_gid& g) {
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g.raw[0],
                g.raw[1], g.raw[2], g.raw[3], g.raw[4], g.raw[5], g.raw[6], g.raw[7], g.raw[8],
                g.raw[9], g.raw[10], g.raw[11], g.raw[12], g.raw[13], g.raw[14], g.raw[15]);
  return buf;
}

}  // namespace

VerbsDevice::VerbsDevice(const RdmaPort& port, int cqDepth, int rail, const std::string& railName)
    : lib_(railName), port_(port), rail_(rail) {
  int n = 0;
  ibv_device** list = lib_.getDeviceList(&n);
  if (list == nullptr) throw RailError(rail, sysError("ibv_get_device_list", errno));
  for (int i = 0; i < n && ctx_ == nullptr; ++i) {
    if (port_.device == lib_.getDeviceName(list[i])) ctx_ = lib_.openDevice(list[i]);
  }
  lib_.freeDeviceList(list);
  if (ctx_ == nullptr) failWith("no such verbs device, or it cannot be opened");
  if (lib_.queryPort(ctx_, static_cast<uint8_t>(port_.port), &attr_) != 0)
    failWith(sysError("ibv_query_port", errno));
  // A port that is down now is not refused here: the rail then registers without carrier, is
  // left out at start and rebuilt (a new device context) by re-admission once the link is back.
  if (lib_.queryGid(ctx_, static_cast<uint8_t>(port_.port), port_.gidIndex, &gid_) != 0)
    failWith(sysError("ibv_query_gid", errno));
  // sysfs and the device must agree on the GID, or the peer would address the wrong one.
  if (gidText(gid_) != port_.gid)
    failWith(strCat("GID ", port_.gidIndex, " is ", gidText(gid_), ", sysfs says ", port_.gid));
  pd_ = lib_.allocPd(ctx_);
  if (pd_ == nullptr) failWith(sysError("ibv_alloc_pd", errno));
  openCompletionQueue(cqDepth);
}

VerbsDevice::VerbsDevice(std::shared_ptr<const VerbsDevice> domain, int cqDepth, int rail,
                         const std::string& railName)
    : lib_(railName), domain_(std::move(domain)), port_(domain_->port_), rail_(rail) {
  ctx_ = domain_->ctx_;
  pd_ = domain_->pd_;
  gid_ = domain_->gid_;
  if (lib_.queryPort(ctx_, static_cast<uint8_t>(port_.port), &attr_) != 0)
    failWith(sysError("ibv_query_port", errno));
  openCompletionQueue(cqDepth);
}

// From a constructor: the destructor does not run if it throws, so release by hand.
void VerbsDevice::failWith(const std::string& what) {
  const std::string msg = strCat(where(), ": ", what);
  release();
  throw RailError(rail_, msg);
}

void VerbsDevice::openCompletionQueue(int cqDepth) {
  channel_ = lib_.createCompChannel(ctx_);
  if (channel_ == nullptr) failWith(sysError("ibv_create_comp_channel", errno));
  // exchange() poll()s the channel's fd with its own timeout, so reads must never block.
  const int fl = fcntl(channel_->fd, F_GETFL);
  if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0)
    failWith(sysError("fcntl(comp channel)", errno));
  cq_ = lib_.createCq(ctx_, cqDepth, nullptr, channel_, 0);
  if (cq_ == nullptr) failWith(sysError("ibv_create_cq", errno));
}

VerbsDevice::~VerbsDevice() { release(); }

void VerbsDevice::release() {
  if (cq_ != nullptr) lib_.destroyCq(cq_);
  if (channel_ != nullptr) lib_.destroyCompChannel(channel_);
  if (domain_ == nullptr && pd_ != nullptr) lib_.deallocPd(pd_);
  if (domain_ == nullptr && ctx_ != nullptr) lib_.closeDevice(ctx_);
  cq_ = nullptr;
  channel_ = nullptr;
  pd_ = nullptr;
  ctx_ = nullptr;
}

std::string VerbsDevice::where() const { return strCat(port_.device, " port ", port_.port); }

RegisteredBuffer::RegisteredBuffer(const VerbsDevice& dev, size_t bytes, int rail)
    : lib_(dev.lib()), bytes_(bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw RailError(rail, sysError("mmap(staging)", errno));
  data_ = static_cast<char*>(p);
  mr_ = lib_.regMr(dev.pd(), data_, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr_ == nullptr) {
    const int err = errno;
    munmap(data_, bytes_);
    throw RailError(rail, strCat(dev.where(), ": ", sysError("ibv_reg_mr", err)));
  }
}

RegisteredBuffer::~RegisteredBuffer() {
  lib_.deregMr(mr_);
  munmap(data_, bytes_);
}

std::string DirectAdvert::encode() const {
  WireWriter w;
  w.u64(addr).u64(len).u32(rkey);
  return w.data();
}

DirectAdvert DirectAdvert::decode(const std::string& wire, int rail, const std::string& from) {
  if (wire.size() != kWireBytes) {
    throw RailError(rail, strCat("receive advertisement from ", from, " has ", wire.size(),
                                 " bytes, want ", kWireBytes));
  }
  DirectAdvert a;
  WireReader r(wire, "receive advertisement");
  a.addr = r.u64();
  a.len = r.u64();
  a.rkey = r.u32();
  r.finish();
  if (a.len == 0 || a.addr + a.len < a.addr) {
    throw RailError(rail, strCat("receive advertisement from ", from, ": ", a.len, " bytes at ",
                                 a.addr, " is no buffer"));
  }
  return a;
}

std::string QpAddress::encode() const {
  WireWriter w;
  w.u32(qpn).u32(lid).bytes(gid, sizeof gid).u64(ringAddr).u32(ringKey).u32(slots);
  w.u32(slotBytes).u32(psn).u32(mtu);
  return w.data();
}

QpAddress QpAddress::decode(const std::string& wire, int rail, const std::string& from) {
  if (wire.size() != kWireBytes) {
    throw RailError(rail, strCat("queue pair address from ", from, " has ", wire.size(),
                                 " bytes, want ", kWireBytes));
  }
  QpAddress a;
  WireReader r(wire, "queue pair address");
  a.qpn = r.u32();
  const uint32_t lid = r.u32();
  r.bytes(a.gid, sizeof a.gid);
  a.ringAddr = r.u64();
  a.ringKey = r.u32();
  a.slots = r.u32();
  a.slotBytes = r.u32();
  a.psn = r.u32();
  a.mtu = r.u32();
  r.finish();
  if (lid > 0xffff || a.qpn > 0xffffff || a.psn > 0xffffff || a.slots == 0 || a.slots > 4096 ||
      a.slotBytes == 0 || a.slotBytes > (64u << 20) || a.mtu < IBV_MTU_256 ||
      a.mtu > IBV_MTU_4096) {
    throw RailError(
        rail, strCat("queue pair address from ", from, " is out of range (qpn ", a.qpn, ", slots ",
                     a.slots, " x ", a.slotBytes, " bytes, mtu ", a.mtu, ")"));
  }
  a.lid = static_cast<uint16_t>(lid);
  return a;
}

QueuePair::QueuePair(const VerbsDevice& dev, int sendDepth, int recvDepth, int rail)
    : dev_(dev), rail_(rail) {
  ibv_qp_init_attr init{};
  init.send_cq = dev.cq();
  init.recv_cq = dev.cq();
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = static_cast<uint32_t>(sendDepth);
  init.cap.max_recv_wr = static_cast<uint32_t>(recvDepth);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = dev.lib().createQp(dev.pd(), &init);
  if (qp_ == nullptr)
    throw RailError(rail, strCat(dev.where(), ": ", sysError("ibv_create_qp", errno)));
}

QueuePair::~QueuePair() { dev_.lib().destroyQp(qp_); }

void QueuePair::toInit() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(dev_.port().port);
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const int rc = dev_.lib().modifyQp(
      qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) throw RailError(rail_, strCat(dev_.where(), ": QP to INIT: ", std::strerror(rc)));
}

void QueuePair::connect(const QpAddress& local, const QpAddress& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;  // 0.64 ms between receiver-not-ready retries
  a.ah_attr.port_num = static_cast<uint8_t>(dev_.port().port);
  if (dev_.roce()) {
    // RoCE v2 is routed by GID (UDP/IP): the global route header is mandatory.
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof remote.gid);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_.port().gidIndex);
    a.ah_attr.grh.hop_limit = 64;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  int rc =
      dev_.lib().modifyQp(qp_, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) throw RailError(rail_, strCat(dev_.where(), ": QP to RTR: ", std::strerror(rc)));
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = local.psn;
  // Local ACK timeout 4.096 us * 2^14 = 67 ms, 7 retries: a path that delivers nothing fails the
  // QP with IBV_WC_RETRY_EXC_ERR after about half a second, a hardware-level black-hole detector
  // below the runtime's own progress watch.
  s.timeout = 14;
  s.retry_cnt = 7;
  s.rnr_retry = 7;  // receiver not ready: retry forever (credits make it rare)
  s.max_rd_atomic = 1;
  rc = dev_.lib().modifyQp(qp_, &s,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) throw RailError(rail_, strCat(dev_.where(), ": QP to RTS: ", std::strerror(rc)));
}

void QueuePair::toError() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  dev_.lib().modifyQp(qp_, &a, IBV_QP_STATE);  // best effort: abort() must not throw
}

}  // namespace nezha
