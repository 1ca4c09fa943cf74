#include "transport/verbs/verbs_peer.h"

#include <arpa/inet.h>

#include <cstring>

#include "base/error.h"

namespace nezha {

VerbsPeer::VerbsPeer(const VerbsDevice& dev, int slotCount, size_t bytesPerSlot, int railIndex)
    : slots(slotCount),
      slotBytes(bytesPerSlot),
      rail(railIndex),
      sendRing(std::make_unique<RegisteredBuffer>(dev, slots * slotBytes, rail)),
      recvRing(std::make_unique<RegisteredBuffer>(dev, slots * slotBytes, rail)),
      qp(std::make_unique<QueuePair>(dev, sendDepth(), recvDepth(), rail)),
      creditLimit(static_cast<uint64_t>(slots)) {}

void VerbsPeer::refillReceives() {
  while (recvPosted < recvDepth()) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = wrId(0, kWrRecv);  // the completion's qp_num names the peer
    wr.num_sge = 0;
    const int rc = ibv_post_recv(qp->get(), &wr, &bad);
    if (rc != 0) throw RailError(rail, strCat("ibv_post_recv: ", std::strerror(rc)));
    ++recvPosted;
  }
}

namespace {

void postWriteImm(ibv_qp* qp, uint64_t id, const ibv_sge* sge, uint64_t raddr, uint32_t rkey,
                  uint32_t imm, int rail) {
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = id;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = const_cast<ibv_sge*>(sge);
  wr.num_sge = sge != nullptr ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  const int rc = ibv_post_send(qp, &wr, &bad);
  if (rc != 0) throw RailError(rail, strCat("ibv_post_send: ", std::strerror(rc)));
}

}  // namespace

void VerbsPeer::postData(uint32_t len, uint32_t flags) {
  const uint64_t slot = sent % slots;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(sendSlot());
  sge.length = len;
  sge.lkey = sendRing->lkey();
  postWriteImm(qp->get(), wrId(0, kWrData), &sge, remote.ringAddr + slot * remote.slotBytes,
               remote.ringKey, flags | len, rail);
  ++sent;
  ++outstanding;
}

void VerbsPeer::postDirect(uint64_t addr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                           uint32_t len) {
  ibv_sge sge{};
  sge.addr = addr;
  sge.length = len;
  sge.lkey = lkey;
  postWriteImm(qp->get(), wrId(0, kWrDirect), &sge, raddr, rkey, kDirectFlag | len, rail);
  ++directPosted;
  ++outstanding;
}

void VerbsPeer::returnCredits(bool flush) {
  const uint64_t owed = consumed - credited;
  if (owed == 0) return;
  // Batched: half a ring at a time keeps credit traffic small while the sender never starves.
  if (!flush && owed < static_cast<uint64_t>(std::max(1, slots / 2))) return;
  if (outstanding >= sendDepth()) return;  // retried after the next send completion
  postWriteImm(qp->get(), wrId(0, kWrCredit), nullptr, remote.ringAddr, remote.ringKey,
               kCreditFlag | static_cast<uint32_t>(owed), rail);
  credited = consumed;
  ++outstanding;
}

}  // namespace nezha
