// VerbsChannel::exchange: the data path (protocol in verbs_peer.h, progress model in
// verbs_channel.h).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "transport/verbs/verbs_channel.h"

namespace nezha {

void VerbsChannel::exchange(std::vector<IoOp>& ops) {
  if (broken_) fail("used after an earlier failure");
  if (aborted_) fail("aborted");
  std::vector<PeerQueues> queues = queueOps(ops);
  guard_.start();
  while (true) {
    bool moved = drainCompletions() > 0;
    bool done = true;
    bool receiving = false;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      PeerQueues& q = queues[p];
      VerbsPeer& peer = *peers_[p];
      moved |= deliver(p, q);
      moved |= postAdverts(p, q);
      moved |= postSends(p, q);
      receiving |= q.recvCursor < q.recvs.size();
      // Done with a peer once every receive is copied out and every write completed.
      done &= q.recvCursor == q.recvs.size() && q.sendCursor == q.sends.size() &&
              peer.sendDone == peer.sent && peer.directDone == peer.directPosted;
    }
    if (done) break;
    if (moved) {
      guard_.moved();
      continue;
    }
    waitForProgress(receiving);
  }
  // Slots consumed in this exchange go back now, so the peer's next exchange starts with a
  // full ring even if ours has nothing to receive from it.
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) peers_[p]->returnCredits(true);
  }
}

std::vector<VerbsChannel::PeerQueues> VerbsChannel::queueOps(std::vector<IoOp>& ops) const {
  std::vector<PeerQueues> queues(size_);
  std::vector<std::pair<int, size_t>> where(ops.size(), {-1, 0});  // recv op -> (peer, index)
  for (size_t i = 0; i < ops.size(); ++i) {
    IoOp& op = ops[i];
    if (op.len == 0) continue;
    NEZHA_ENFORCE(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad peer ", op.peer);
    NEZHA_ENFORCE(op.align > 0 && op.len % op.align == 0 && op.align <= kSlotBytes, "length ",
                  op.len, " not aligned to ", op.align);
    NEZHA_ENFORCE(!op.region || op.after == nullptr,
                  "a registered (zero-copy) send cannot forward a receive");
    PeerQueues& q = queues[op.peer];
    if (op.kind == IoOp::kRecv) {
      where[i] = {op.peer, q.recvs.size()};
      q.recvs.push_back(Part{&op});
    } else {
      q.sends.push_back(Part{&op});
    }
  }
  // Gates once the receive vectors no longer move.
  for (auto& q : queues) {
    for (Part& s : q.sends) {
      if (s.op->after == nullptr) continue;
      const size_t gi = static_cast<size_t>(s.op->after - ops.data());
      NEZHA_ENFORCE(gi < ops.size() && s.op->after->kind == IoOp::kRecv &&
                        s.op->after->len == s.op->len && s.op->after->align == s.op->align,
                    "forward gate must be a receive of the same shape in this exchange");
      s.gate = &queues[where[gi].first].recvs[where[gi].second];
    }
  }
  return queues;
}

int VerbsChannel::drainCompletions() {
  ibv_wc wc[32];
  int total = 0;
  while (true) {
    const int n = ibv_poll_cq(device_->cq(), 32, wc);
    if (n < 0) fail("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      int p = -1;
      for (int k = 0; k < size_ && p < 0; ++k) {
        if (k != rank_ && peers_[k]->qp->qpn() == wc[i].qp_num) p = k;
      }
      if (p < 0) continue;  // not ours (cannot happen with one CQ per channel)
      VerbsPeer& peer = *peers_[p];
      if (wc[i].status != IBV_WC_SUCCESS) {
        fail(strCat("work completion from rank ", p, ": ", device_->lib().wcStatusStr(wc[i].status),
                    aborted_ ? " (aborted)" : ""));
      }
      if (wrKind(wc[i].wr_id) == kWrRecv) {
        --peer.recvPosted;
        NEZHA_ENFORCE(
            wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0,
            "unexpected receive completion opcode ", wc[i].opcode);
        const uint32_t imm = ntohl(wc[i].imm_data);
        if ((imm & kCreditFlag) != 0) {
          peer.creditLimit += imm & ~kCreditFlag;
        } else if ((imm & kDirectFlag) != 0) {  // landed in our buffer: no slot used
          peer.arrivals.push_back(imm);
          guard_.arrived();
        } else {
          const uint32_t len = imm & ~kAdvertFlag;
          NEZHA_ENFORCE(len > 0 && len <= kSlotBytes && peer.arrived - peer.consumed < kSlots,
                        "rank ", p, " wrote a chunk of ", len, " bytes beyond its credits");
          peer.arrivals.push_back(imm);
          ++peer.arrived;
          guard_.arrived();
        }
      } else {
        --peer.outstanding;
        if (wrKind(wc[i].wr_id) == kWrData) ++peer.sendDone;
        if (wrKind(wc[i].wr_id) == kWrDirect) ++peer.directDone;
      }
    }
    total += n;
    if (n < 32) break;
  }
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && total > 0) peers_[p]->refillReceives();
  }
  return total;
}

// Copies chunks that landed in the ring into the pending receives, in order; takes adverts and
// direct writes as they come (direct placement, verbs_peer.h).
bool VerbsChannel::deliver(int p, PeerQueues& q) {
  VerbsPeer& peer = *peers_[p];
  bool moved = false;
  while (!peer.arrivals.empty()) {
    const uint32_t imm = peer.arrivals.front();
    if ((imm & kDirectFlag) != 0) {
      if (!landDirect(p, q, imm & ~kDirectFlag)) break;
      peer.arrivals.pop_front();
      moved = true;
      continue;
    }
    if ((imm & kAdvertFlag) != 0) {  // a send of ours may write this buffer now
      const uint32_t len = imm & ~kAdvertFlag;
      const std::string wire(peer.recvSlot(peer.consumed), len);
      peer.adverts.push_back(
          DirectAdvert::decode(wire, rail_, strCat("rank ", p, " on rail ", spec_.name)));
      peer.arrivals.pop_front();
      ++peer.consumed;
      peer.returnCredits(false);
      moved = true;
      continue;
    }
    if (q.recvCursor == q.recvs.size()) break;
    Part& part = q.recvs[q.recvCursor];
    const uint32_t len = imm;
    NEZHA_ENFORCE(
        !part.op->region, "rank ", p,
        " sent ring chunks for a registered receive (both ends' ops must carry a region)");
    NEZHA_ENFORCE(part.done + len <= part.op->len && len % part.op->align == 0, "rank ", p,
                  " sent a chunk of ", len, " bytes that does not fit the receive (",
                  part.op->len - part.done, " left, element ", part.op->align, ")");
    std::memcpy(static_cast<char*>(part.op->buf) + part.done, peer.recvSlot(peer.consumed), len);
    const size_t offset = part.done;
    part.done += len;
    peer.arrivals.pop_front();
    ++peer.consumed;
    moved = true;
    if (part.op->onRecv) part.op->onRecv(offset, len);
    if (part.done == part.op->len) ++q.recvCursor;
    peer.returnCredits(q.recvCursor == q.recvs.size());
  }
  return moved;
}

bool VerbsChannel::landDirect(int p, PeerQueues& q, uint32_t len) {
  if (q.recvCursor == q.recvs.size()) return false;
  Part& part = q.recvs[q.recvCursor];
  NEZHA_ENFORCE(part.op->region && q.advertCursor > q.recvCursor && part.done + len <= part.op->len,
                "rank ", p, " wrote ", len,
                " bytes directly into a receive that did not advertise"
                " room for them");
  part.done += len;
  if (part.done == part.op->len) {
    if (part.op->onRecv) part.op->onRecv(0, part.op->len);
    ++q.recvCursor;
  }
  return true;
}

// The receiver's side of direct placement: each receive with a region tells the sender where
// its bytes go. Adverts use ring slots (and credits) like data chunks.
bool VerbsChannel::postAdverts(int p, PeerQueues& q) {
  VerbsPeer& peer = *peers_[p];
  bool moved = false;
  while (q.advertCursor < q.recvs.size()) {
    const IoOp& op = *q.recvs[q.advertCursor].op;
    if (op.region) {
      if (!peer.canSend()) break;
      const DirectAdvert a{reinterpret_cast<uintptr_t>(op.buf), op.len, op.region->rkey};
      const std::string wire = a.encode();
      std::memcpy(peer.sendSlot(), wire.data(), wire.size());
      try {
        peer.postData(static_cast<uint32_t>(wire.size()), kAdvertFlag);
      } catch (const RailError& e) {
        fail(e.what());
      }
      moved = true;
    }
    ++q.advertCursor;
  }
  return moved;
}

// The sender's side: once the peer advertised the matching receive, the HCA reads the caller's
// region and writes the advertised buffer; the CPU touches neither.
bool VerbsChannel::postDirect(int p, Part& part) {
  VerbsPeer& peer = *peers_[p];
  if (peer.adverts.empty()) return false;  // the receive is not posted yet
  const DirectAdvert& a = peer.adverts.front();
  if (a.len != part.op->len) {
    fail(strCat("rank ", p, " advertised a receive of ", a.len, " bytes for a send of ",
                part.op->len));
  }
  bool moved = false;
  while (part.done < part.op->len && peer.canWriteDirect()) {
    const auto len =
        static_cast<uint32_t>(std::min<size_t>(part.op->len - part.done, kDirectWriteBytes));
    try {
      peer.postDirect(reinterpret_cast<uintptr_t>(part.op->buf) + part.done, part.op->region->lkey,
                      a.addr + part.done, a.rkey, len);
    } catch (const RailError& e) {
      fail(e.what());
    }
    part.done += len;
    moved = true;
  }
  if (part.done == part.op->len) peer.adverts.pop_front();
  return moved;
}

bool VerbsChannel::postSends(int p, PeerQueues& q) {
  VerbsPeer& peer = *peers_[p];
  bool moved = false;
  peer.returnCredits(false);  // credits deferred while the send queue was full
  while (q.sendCursor < q.sends.size()) {
    Part& part = q.sends[q.sendCursor];
    if (part.op->region) {
      moved |= postDirect(p, part);
      if (part.done < part.op->len) break;
      ++q.sendCursor;
      continue;
    }
    if (!peer.canSend()) break;
    const size_t limit = part.gate != nullptr ? part.gate->done : part.op->len;
    if (part.done >= limit) break;  // waiting for the data it forwards
    size_t len = std::min(limit - part.done, kSlotBytes);
    len -= len % part.op->align;
    if (len == 0) break;
    std::memcpy(peer.sendSlot(), static_cast<const char*>(part.op->buf) + part.done, len);
    try {
      peer.postData(static_cast<uint32_t>(len));
    } catch (const RailError& e) {
      fail(e.what());
    }
    part.done += len;
    moved = true;
    if (part.done == part.op->len) ++q.sendCursor;
  }
  return moved;
}

// Sleeps until a completion or a peer's EOF, then lets the guard judge the silence like the TCP
// rail's.
void VerbsChannel::waitForProgress(bool receiving) {
  // Arm first, then look once more: a completion that raced the arming is seen here.
  if (ibv_req_notify_cq(device_->cq(), 0) != 0) fail("ibv_req_notify_cq failed");
  int n = drainCompletions();
  if (n == 0) {
    std::vector<pollfd> pfds;
    pfds.push_back({device_->channel()->fd, POLLIN, 0});
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) pfds.push_back({peers_[p]->boot.get(), POLLIN, 0});
    }
    n = ::poll(pfds.data(), pfds.size(), guard_.waitMs());
    if (n < 0 && errno != EINTR) fail(sysError("poll", errno));
    if (n > 0 && (pfds[0].revents & POLLIN) != 0) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (device_->lib().getCqEvent(device_->channel(), &cq, &ctx) == 0)
        device_->lib().ackCqEvents(cq, 1);
    }
    for (size_t i = 1; n > 0 && i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      // Nothing is ever sent on a bootstrap connection after setup: readable = EOF or error.
      const int p = static_cast<int>(i - 1) + (static_cast<int>(i - 1) >= rank_ ? 1 : 0);
      char byte;
      const ssize_t r = ::recv(pfds[i].fd, &byte, 1, MSG_DONTWAIT);
      if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR)))
        fail(strCat("rank ", p, " closed the rail", aborted_ ? " (aborted here)" : ""));
    }
    if (aborted_) fail("aborted");
  }
  // Arrivals prove a receiving rail alive; posted writes only queue locally.
  const std::string why = guard_.judge(n > 0, receiving, [&] {
    std::ostringstream waiting;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const VerbsPeer& peer = *peers_[p];
      if (peer.sendDone < peer.sent) waiting << " write->" << p;
      if (peer.directDone < peer.directPosted) waiting << " direct-write->" << p;
    }
    if (receiving) waiting << " receives";
    return waiting.str();
  });
  if (!why.empty()) fail(why);
}

}  // namespace nezha
