// The double's RC queue pairs: state machine, posting, and the TCP connection that carries
// RDMA writes (with immediate) and their acknowledgements between two QPs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ibverbs_double.h"

namespace ibvdouble {

namespace {

enum FrameType : uint32_t { kWriteImm = 1, kWrite = 2, kAck = 3 };
struct Frame {
  uint32_t type;
  uint32_t imm;  // network order, as posted
  uint64_t raddr;
  uint32_t rkey;
  uint32_t len;
};
struct Hello {
  uint32_t magic;
  uint32_t from, to;  // QPNs
};
constexpr uint32_t kMagic = 0x4e5a4942;  // "NZIB"

bool writeFull(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool readFull(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Waits for `fd` to be ready for `events` or the QP's wake eventfd; true = fd ready.
bool waitFd(int fd, short events, int wake) {
  pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  while (true) {
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return false;
    if (fds[0].revents != 0) return true;
  }
}

void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

void Qp::toError(ibv_wc_status first) {
  if (state == IBV_QPS_ERR || destroying) return;
  state = IBV_QPS_ERR;
  qp.state = IBV_QPS_ERR;
  if (sock >= 0) shutdown(sock, SHUT_RDWR);  // the peer's QP sees the connection go
  auto* scq = reinterpret_cast<Cq*>(qp.send_cq);
  auto* rcq = reinterpret_cast<Cq*>(qp.recv_cq);
  ibv_wc_status status = first;
  auto flushSend = [&](const SendWr& wr) {
    ibv_wc wc{};
    wc.wr_id = wr.wrId;
    wc.status = status;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = qp.qp_num;
    scq->push(wc);
    status = IBV_WC_WR_FLUSH_ERR;
  };
  for (const SendWr& wr : unacked) flushSend(wr);
  for (const SendWr& wr : toSend) flushSend(wr);
  unacked.clear();
  toSend.clear();
  for (uint64_t id : recvs) {
    ibv_wc wc{};
    wc.wr_id = id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp.qp_num;
    rcq->push(wc);
  }
  recvs.clear();
  cv.notify_all();
}

namespace {

// The lower (IP, QPN) dials, the other accepts; both then check the hello. -1 on failure.
int establish(Qp* q, uint32_t localIp, const std::string& iface) {
  const uint64_t me = (static_cast<uint64_t>(ntohl(localIp)) << 32) | q->qp.qp_num;
  const uint64_t them = (static_cast<uint64_t>(ntohl(q->remoteIp)) << 32) | q->remoteQpn;
  if (me < them) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    // Over the rail's own interface (root only; on lo the address alone is enough).
    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(),
               static_cast<socklen_t>(iface.size()));
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = localIp;
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = q->remoteIp;
    dst.sin_port = htons(static_cast<uint16_t>(q->remoteQpn));
    int err = 0;
    socklen_t len = sizeof err;
    if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
        (connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 && errno != EINPROGRESS) ||
        !waitFd(fd, POLLOUT, q->wake) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0) {
      close(fd);
      return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tune(fd);
    const Hello h{kMagic, q->qp.qp_num, q->remoteQpn};
    if (!writeFull(fd, &h, sizeof h)) {
      close(fd);
      return -1;
    }
    return fd;
  }
  while (waitFd(q->listenFd, POLLIN, q->wake)) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    int fd = accept4(q->listenFd, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello h{};
    if (waitFd(fd, POLLIN, q->wake) && readFull(fd, &h, sizeof h) && h.magic == kMagic &&
        h.to == q->qp.qp_num && h.from == q->remoteQpn && from.sin_addr.s_addr == q->remoteIp) {
      tune(fd);
      return fd;
    }
    close(fd);
  }
  return -1;
}

void receiveLoop(Qp* q, uint32_t localIp, std::string iface) {
  const int fd = establish(q, localIp, iface);
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (fd < 0 || q->destroying || q->state == IBV_QPS_ERR) {
      if (fd >= 0) close(fd);
      q->toError(IBV_WC_RETRY_EXC_ERR);
      return;
    }
    q->sock = fd;
    q->cv.notify_all();
  }
  auto* scq = reinterpret_cast<Cq*>(q->qp.send_cq);
  auto* rcq = reinterpret_cast<Cq*>(q->qp.recv_cq);
  while (true) {
    Frame h{};
    if (!readFull(fd, &h, sizeof h)) break;
    if (h.type == kAck) {
      std::lock_guard<std::mutex> lock(q->mu);
      if (q->unacked.empty()) break;
      const SendWr wr = q->unacked.front();
      q->unacked.pop_front();
      if (wr.signaled) {
        ibv_wc wc{};
        wc.wr_id = wr.wrId;
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = IBV_WC_RDMA_WRITE;
        wc.byte_len = wr.len;
        wc.qp_num = q->qp.qp_num;
        scq->push(wc);
      }
      continue;
    }
    if (h.type != kWriteImm && h.type != kWrite) break;
    char* dest = q->ctx->hostAddress(q->qp.pd, h.rkey, h.raddr, h.len, IBV_ACCESS_REMOTE_WRITE);
    if (h.len > 0 && dest == nullptr) {
      std::lock_guard<std::mutex> lock(q->mu);
      q->toError(IBV_WC_REM_ACCESS_ERR);
      return;
    }
    uint64_t recvId = 0;
    if (h.type == kWriteImm) {
      // Receiver not ready: hold the write (and the connection) until a receive is posted.
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait(lock,
                 [&] { return !q->recvs.empty() || q->state == IBV_QPS_ERR || q->destroying; });
      if (q->state == IBV_QPS_ERR || q->destroying) return;
      recvId = q->recvs.front();
      q->recvs.pop_front();
    }
    if (h.len > 0 && !readFull(fd, dest, h.len)) break;
    if (h.type == kWriteImm) {
      ibv_wc wc{};
      wc.wr_id = recvId;
      wc.status = IBV_WC_SUCCESS;
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = h.imm;
      wc.byte_len = h.len;
      wc.qp_num = q->qp.qp_num;
      rcq->push(wc);
    }
    std::lock_guard<std::mutex> lock(q->mu);
    ++q->acksOwed;
    q->cv.notify_all();
  }
  // The connection is gone (the peer's QP failed or was destroyed, or the path broke).
  std::lock_guard<std::mutex> lock(q->mu);
  q->toError(IBV_WC_RETRY_EXC_ERR);
}

void sendLoop(Qp* q) {
  std::unique_lock<std::mutex> lock(q->mu);
  while (true) {
    q->cv.wait(lock, [&] {
      return q->state == IBV_QPS_ERR || q->destroying ||
             (q->sock >= 0 && (q->acksOwed > 0 || !q->toSend.empty()));
    });
    if (q->state == IBV_QPS_ERR || q->destroying) return;
    const int fd = q->sock;
    bool ok;
    if (q->acksOwed > 0) {
      --q->acksOwed;
      lock.unlock();
      const Frame f{kAck, 0, 0, 0, 0};
      ok = writeFull(fd, &f, sizeof f);
    } else {
      const SendWr wr = q->toSend.front();
      q->toSend.pop_front();
      q->unacked.push_back(wr);
      lock.unlock();
      const Frame f{wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? kWriteImm : kWrite, wr.imm,
                    wr.remoteAddr, wr.rkey, wr.len};
      ok = writeFull(fd, &f, sizeof f) &&
           (wr.len == 0 || writeFull(fd, reinterpret_cast<const void*>(wr.localAddr), wr.len));
    }
    lock.lock();
    if (!ok) {
      q->toError(IBV_WC_RETRY_EXC_ERR);
      return;
    }
  }
}

}  // namespace

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* q = reinterpret_cast<Qp*>(qp);
  std::lock_guard<std::mutex> lock(q->mu);
  for (; wr != nullptr; wr = wr->next) {
    if (wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IBV_WR_RDMA_WRITE) {
      *bad = wr;
      return EINVAL;
    }
    if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR) {
      *bad = wr;
      return EINVAL;
    }
    if (wr->num_sge > 1 || q->toSend.size() + q->unacked.size() >= q->maxSend) {
      *bad = wr;
      return wr->num_sge > 1 ? EINVAL : ENOMEM;
    }
    SendWr s{};
    s.wrId = wr->wr_id;
    s.opcode = wr->opcode;
    s.imm = wr->imm_data;
    s.remoteAddr = wr->wr.rdma.remote_addr;
    s.rkey = wr->wr.rdma.rkey;
    s.signaled = q->sigAll || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    if (wr->num_sge == 1) {
      s.len = wr->sg_list[0].length;
      // The bytes are read at send time from where the MR has them in this process.
      char* src = q->ctx->hostAddress(q->qp.pd, wr->sg_list[0].lkey, wr->sg_list[0].addr, s.len, 0);
      if (s.len > 0 && src == nullptr) {
        *bad = wr;
        return EINVAL;
      }
      s.localAddr = reinterpret_cast<uintptr_t>(src);
    }
    if (q->state == IBV_QPS_ERR) {
      // Work posted to a QP in error completes at once, flushed.
      ibv_wc wc{};
      wc.wr_id = s.wrId;
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.qp_num = q->qp.qp_num;
      reinterpret_cast<Cq*>(q->qp.send_cq)->push(wc);
      continue;
    }
    q->toSend.push_back(s);
  }
  q->cv.notify_all();
  return 0;
}

int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* q = reinterpret_cast<Qp*>(qp);
  std::lock_guard<std::mutex> lock(q->mu);
  for (; wr != nullptr; wr = wr->next) {
    if (q->state == IBV_QPS_RESET || q->recvs.size() >= q->maxRecv) {
      *bad = wr;
      return q->state == IBV_QPS_RESET ? EINVAL : ENOMEM;
    }
    if (q->state == IBV_QPS_ERR) {
      ibv_wc wc{};
      wc.wr_id = wr->wr_id;
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.opcode = IBV_WC_RECV;
      wc.qp_num = q->qp.qp_num;
      reinterpret_cast<Cq*>(q->qp.recv_cq)->push(wc);
      continue;
    }
    q->recvs.push_back(wr->wr_id);
  }
  q->cv.notify_all();
  return 0;
}

}  // namespace ibvdouble

using namespace ibvdouble;

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC || init->srq != nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* c = reinterpret_cast<Context*>(pd->context);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  socklen_t len = sizeof any;
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      listen(lfd, 4) != 0 || getsockname(lfd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    if (lfd >= 0) close(lfd);
    return nullptr;
  }
  auto* q = new Qp;
  q->ctx = c;
  q->listenFd = lfd;
  q->wake = eventfd(0, EFD_CLOEXEC);
  q->maxSend = init->cap.max_send_wr;
  q->maxRecv = init->cap.max_recv_wr;
  q->sigAll = init->sq_sig_all != 0;
  q->qp.context = pd->context;
  q->qp.qp_context = init->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.qp_num = ntohs(any.sin_port);  // the QPN is the port peers dial
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  registerQp(c, q);
  return &q->qp;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto* q = reinterpret_cast<Qp*>(qp);
  if ((mask & IBV_QP_STATE) == 0) return 0;
  std::lock_guard<std::mutex> lock(q->mu);
  switch (attr->qp_state) {
    case IBV_QPS_INIT:
      if (q->state != IBV_QPS_RESET) return EINVAL;
      break;
    case IBV_QPS_RTR: {
      if (q->state != IBV_QPS_INIT || (mask & IBV_QP_AV) == 0 || (mask & IBV_QP_DEST_QPN) == 0 ||
          !attr->ah_attr.is_global)
        return EINVAL;
      const Device* d = q->ctx->device;
      const int sgid = attr->ah_attr.grh.sgid_index;
      ibv_gid local{};
      if (ibv_query_gid(qp->context, 1, sgid, &local) != 0) return EINVAL;
      uint32_t localIp;
      std::memcpy(&localIp, local.raw + 12, 4);
      std::memcpy(&q->remoteIp, attr->ah_attr.grh.dgid.raw + 12, 4);
      q->remoteQpn = attr->dest_qp_num;
      q->worker = std::thread(receiveLoop, q, localIp, d->iface);
      q->sender = std::thread(sendLoop, q);
      break;
    }
    case IBV_QPS_RTS:
      if (q->state != IBV_QPS_RTR) return EINVAL;
      break;
    case IBV_QPS_ERR:
      q->toError(IBV_WC_WR_FLUSH_ERR);
      return 0;
    default:
      return EINVAL;
  }
  q->state = attr->qp_state;
  q->qp.state = attr->qp_state;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  auto* q = reinterpret_cast<Qp*>(qp);
  {
    std::lock_guard<std::mutex> lock(q->mu);
    q->destroying = true;
    if (q->sock >= 0) shutdown(q->sock, SHUT_RDWR);
    q->cv.notify_all();
  }
  const uint64_t one = 1;
  if (write(q->wake, &one, sizeof one) < 0) {
  }
  if (q->worker.joinable()) q->worker.join();
  if (q->sender.joinable()) q->sender.join();
  unregisterQp(q->ctx, q);
  if (q->sock >= 0) close(q->sock);
  close(q->listenFd);
  close(q->wake);
  delete q;
  return 0;
}

}  // extern "C"
