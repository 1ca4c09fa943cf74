// Test double of NVIDIA's libsharp_coll.so (TEST ONLY; loaded by the runtime's tests through
// NEZHA_SHARP_LIBRARY or LD_LIBRARY_PATH, never installed). Same exported symbols and struct
// layouts as the real library (the runtime's declarations, transport/sharp/sharp_api.h), so the
// runtime's real SHARP code path runs unchanged against it.
//
// What it models, per the public API's contract:
//  - sharp_coll_init: needs a device (ib_dev_list) and an aggregation manager to talk to; here the
//    "HCA" is the rail's network interface named in ib_dev_list, and the aggregation node is
//    nezha-sharp-aggregator at NEZHA_SHARP_DOUBLE_AGGREGATOR=ip:port (the double's only knob).
//    Calls the out-of-band barrier once, as the real library does during job creation.
//  - sharp_coll_comm_init: group creation over the out-of-band collectives (rank 0 draws the
//    group's nonce and broadcasts it, gathers every member's rank and checks them), then every
//    member joins the group at the aggregator over the SHARP rail (socket bound to the rail's
//    interface) and waits until the whole group joined.
//  - sharp_coll_do_allreduce_nb / req_test / req_wait / req_free: the contribution goes to the
//    aggregator, which reduces all members' contributions and sends every member the result.
//  - Failures: the rail's port losing carrier (like IBV_EVENT_PORT_ERR under the real library)
//    completes pending and later operations with SHARP_COLL_EDEV; the aggregator closing the
//    group (a member vanished) gives SHARP_COLL_ECONN_TREE; a black-holed rail simply never
//    completes (the caller's progress timeout must catch it, as with the real library when
//    coll_timeout is infinite).
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/sharp/sharp_api.h"
#include "wire.h"

using namespace nezha::sharp;
namespace wire = nezha::sharpdouble;
using Clock = std::chrono::steady_clock;

// The library's opaque handles, defined here (the runtime only ever sees pointers).
namespace nezha::sharp {
struct sharp_coll_context {
  uint64_t jobId = 0;
  int rank = 0, size = 0;
  std::string device;
  sockaddr_in aggregator{};
  sharp_coll_out_of_band_colls oob{};
  void* oobCtx = nullptr;
};

struct sharp_coll_comm {
  sharp_coll_context* ctx = nullptr;
  int fd = -1;
  uint64_t seq = 0;
  int error = SHARP_COLL_SUCCESS;  // sticky: a broken group stays broken
  bool busy = false;               // one operation at a time (the runtime's use)
  Clock::time_point nextCarrierCheck{};
};
}  // namespace nezha::sharp

namespace {

struct Mr {
  char* ptr;
  size_t len;
};

struct Request {
  sharp_coll_comm* comm;
  std::string out;  // header + payload still to send
  size_t sent = 0;
  wire::OpReply reply{};
  size_t replyGot = 0;
  char* result;
  size_t resultLen, resultGot = 0;
  bool done = false;
  int status = SHARP_COLL_SUCCESS;
};

size_t dtypeSize(int dt) {
  switch (dt) {
    case SHARP_DTYPE_UNSIGNED:
    case SHARP_DTYPE_INT:
    case SHARP_DTYPE_FLOAT:
      return 4;
    case SHARP_DTYPE_UNSIGNED_LONG:
    case SHARP_DTYPE_LONG:
    case SHARP_DTYPE_DOUBLE:
      return 8;
    case SHARP_DTYPE_UNSIGNED_SHORT:
    case SHARP_DTYPE_SHORT:
    case SHARP_DTYPE_FLOAT_SHORT:
    case SHARP_DTYPE_BFLOAT16:
      return 2;
    case SHARP_DTYPE_UINT8:
    case SHARP_DTYPE_INT8:
      return 1;
    default:
      return 0;
  }
}

bool carrierUp(const std::string& dev) {
  std::ifstream in("/sys/class/net/" + dev + "/carrier");
  std::string s;
  return std::getline(in, s) && s == "1";
}

bool parseAggregator(const char* text, sockaddr_in& out) {
  if (text == nullptr) return false;
  std::string s = text;
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  const int port = std::atoi(s.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return false;
  out.sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, s.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

// Blocking helpers with an overall deadline (group creation only).
bool waitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool sendAll(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFd(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool recvAll(int fd, void* buf, size_t len, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFd(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Moves whatever the socket takes / gives now; completes the request when the reply is in.
void progress(Request& r) {
  sharp_coll_comm& c = *r.comm;
  auto finish = [&](int status) {
    r.done = true;
    r.status = status;
    if (status != SHARP_COLL_SUCCESS) c.error = status;
    c.busy = false;
  };
  if (c.error != SHARP_COLL_SUCCESS) return finish(c.error);
  const auto now = Clock::now();
  if (now >= c.nextCarrierCheck) {
    c.nextCarrierCheck = now + std::chrono::milliseconds(5);
    if (!carrierUp(c.ctx->device)) return finish(SHARP_COLL_EDEV);
  }
  while (r.sent < r.out.size()) {
    const ssize_t n = send(c.fd, r.out.data() + r.sent, r.out.size() - r.sent, MSG_NOSIGNAL);
    if (n > 0) {
      r.sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    } else {
      return finish(SHARP_COLL_ECONN_TREE);
    }
  }
  for (;;) {
    char* dst;
    size_t want;
    if (r.replyGot < sizeof(r.reply)) {
      dst = reinterpret_cast<char*>(&r.reply) + r.replyGot;
      want = sizeof(r.reply) - r.replyGot;
    } else {
      if (r.reply.magic != wire::kReplyMagic || r.reply.seq != c.seq) {
        return finish(SHARP_COLL_ERROR);
      }
      if (r.reply.status != 0) return finish(r.reply.status);
      if (r.reply.bytes != r.resultLen) return finish(SHARP_COLL_ERROR);
      if (r.resultGot == r.resultLen) {
        ++c.seq;
        return finish(SHARP_COLL_SUCCESS);
      }
      dst = r.result + r.resultGot;
      want = r.resultLen - r.resultGot;
    }
    const ssize_t n = recv(c.fd, dst, want, 0);
    if (n > 0) {
      (r.replyGot < sizeof(r.reply) ? r.replyGot : r.resultGot) += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    } else {
      return finish(SHARP_COLL_ECONN_TREE);  // the aggregator closed the group
    }
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int sharp_coll_init(sharp_coll_init_spec* spec,
                                                           sharp_coll_context** out) {
  if (spec == nullptr || out == nullptr || spec->world_size < 1 || spec->world_rank < 0 ||
      spec->world_rank >= spec->world_size || spec->oob_colls.barrier == nullptr ||
      spec->oob_colls.bcast == nullptr || spec->oob_colls.gather == nullptr) {
    return SHARP_COLL_EINVAL;
  }
  auto* ctx = new sharp_coll_context();
  ctx->jobId = spec->job_id;
  ctx->rank = spec->world_rank;
  ctx->size = spec->world_size;
  ctx->device = spec->config.ib_dev_list ? spec->config.ib_dev_list : "";
  ctx->oob = spec->oob_colls;
  ctx->oobCtx = spec->oob_ctx;
  // The fake HCA is the rail's interface: it must exist (a "mlx5_0:1" name does not here).
  std::ifstream probe("/sys/class/net/" + ctx->device + "/carrier");
  if (ctx->device.empty() || !probe) {
    delete ctx;
    return SHARP_COLL_EDEV;
  }
  if (!parseAggregator(std::getenv("NEZHA_SHARP_DOUBLE_AGGREGATOR"), ctx->aggregator)) {
    delete ctx;
    return SHARP_COLL_ESESS_INIT;
  }
  if (ctx->oob.barrier(ctx->oobCtx) != 0) {
    delete ctx;
    return SHARP_COLL_EOOB;
  }
  *out = ctx;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_finalize(sharp_coll_context* ctx) {
  delete ctx;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_comm_init(sharp_coll_context* ctx,
                                                                sharp_coll_comm_init_spec* spec,
                                                                sharp_coll_comm** out) {
  if (ctx == nullptr || spec == nullptr || out == nullptr || spec->size != ctx->size ||
      spec->rank < 0 || spec->rank >= spec->size) {
    return SHARP_COLL_EINVAL;
  }
  // Group creation over the out-of-band collectives: the nonce from rank 0, every member's rank
  // gathered and checked by rank 0, the verdict broadcast.
  uint64_t nonce = 0;
  if (spec->rank == 0) nonce = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  if (ctx->oob.bcast(spec->oob_ctx, &nonce, sizeof(nonce), 0) != 0) return SHARP_COLL_EOOB;
  int32_t mine = spec->rank;
  std::vector<int32_t> all(static_cast<size_t>(spec->size), -1);
  if (ctx->oob.gather(spec->oob_ctx, 0, &mine, all.data(), sizeof(mine)) != 0) {
    return SHARP_COLL_EOOB;
  }
  int32_t verdict = SHARP_COLL_SUCCESS;
  if (spec->rank == 0) {
    for (int i = 0; i < spec->size; ++i) {
      if (all[static_cast<size_t>(i)] != i) verdict = SHARP_COLL_EGROUP_ID;
    }
  }
  if (ctx->oob.bcast(spec->oob_ctx, &verdict, sizeof(verdict), 0) != 0) return SHARP_COLL_EOOB;
  if (verdict != SHARP_COLL_SUCCESS) return verdict;
  if (!carrierUp(ctx->device)) return SHARP_COLL_EDEV;

  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SHARP_COLL_ENOMEM;
  auto fail = [fd](int status) {
    close(fd);
    return status;
  };
  // Over the SHARP rail only, like an HCA port.
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ctx->device.c_str(),
                 static_cast<socklen_t>(ctx->device.size())) != 0) {
    return fail(SHARP_COLL_EDEV);
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&ctx->aggregator), sizeof(ctx->aggregator)) !=
          0 &&
      errno != EINPROGRESS) {
    return fail(SHARP_COLL_ECONN_TREE);
  }
  int soErr = 0;
  socklen_t soLen = sizeof(soErr);
  if (!waitFd(fd, POLLOUT, deadline) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &soLen) != 0 ||
      soErr != 0) {
    return fail(SHARP_COLL_ECONN_TREE);
  }
  const wire::Hello hello{wire::kHelloMagic,
                          wire::kVersion,
                          ctx->jobId,
                          nonce,
                          static_cast<uint32_t>(spec->size),
                          static_cast<uint32_t>(spec->rank)};
  wire::HelloReply reply{};
  if (!sendAll(fd, &hello, sizeof(hello), deadline) ||
      !recvAll(fd, &reply, sizeof(reply), deadline) || reply.magic != wire::kReplyMagic) {
    return fail(SHARP_COLL_EGROUP_JOIN);
  }
  if (reply.status != 0) return fail(reply.status);
  auto* comm = new sharp_coll_comm();
  comm->ctx = ctx;
  comm->fd = fd;
  *out = comm;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_comm_destroy(sharp_coll_comm* comm) {
  if (comm == nullptr) return SHARP_COLL_EINVAL;
  close(comm->fd);
  delete comm;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_reg_mr(sharp_coll_context* ctx, void* buf,
                                                             size_t size, void** mr) {
  if (ctx == nullptr || buf == nullptr || size == 0 || mr == nullptr) return SHARP_COLL_EINVAL;
  *mr = new Mr{static_cast<char*>(buf), size};
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_dereg_mr(sharp_coll_context* ctx, void* mr) {
  if (ctx == nullptr || mr == nullptr) return SHARP_COLL_EINVAL;
  delete static_cast<Mr*>(mr);
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_do_allreduce_nb(sharp_coll_comm* comm,
                                                                      sharp_coll_reduce_spec* spec,
                                                                      void** handle) {
  if (comm == nullptr || spec == nullptr || handle == nullptr || comm->busy) {
    return SHARP_COLL_EINVAL;
  }
  if (comm->error != SHARP_COLL_SUCCESS) return comm->error;
  const size_t es = dtypeSize(spec->dtype);
  if (es == 0 || spec->op < SHARP_OP_MAX || spec->op >= SHARP_OP_NULL) return SHARP_COLL_EINVAL;
  const sharp_coll_data_desc& s = spec->sbuf_desc;
  const sharp_coll_data_desc& d = spec->rbuf_desc;
  const size_t bytes = spec->length * es;
  // Like the hardware path: host memory, contiguous, inside a registered region.
  auto inside = [bytes](const sharp_coll_data_desc& b) {
    if (b.type != SHARP_DATA_BUFFER || b.mem_type != SHARP_MEM_TYPE_HOST) return false;
    const Mr* mr = static_cast<const Mr*>(b.buffer.mem_handle);
    const char* p = static_cast<const char*>(b.buffer.ptr);
    return mr != nullptr && p >= mr->ptr && b.buffer.length >= bytes &&
           p + bytes <= mr->ptr + mr->len;
  };
  if (bytes == 0 || bytes > wire::kMaxPayload || !inside(s) || !inside(d)) return SHARP_COLL_EINVAL;
  auto* r = new Request();
  r->comm = comm;
  wire::OpHeader h{wire::kOpMagic, spec->dtype, spec->op, 0, comm->seq, spec->length, bytes};
  r->out.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  r->out.append(static_cast<const char*>(s.buffer.ptr), bytes);
  r->result = static_cast<char*>(d.buffer.ptr);
  r->resultLen = bytes;
  comm->busy = true;
  progress(*r);
  *handle = r;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_req_test(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return 1;
  if (!r->done) progress(*r);
  return r->done ? 1 : 0;
}

__attribute__((visibility("default"))) int sharp_coll_req_wait(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return SHARP_COLL_EINVAL;
  while (!r->done) {
    progress(*r);
    if (!r->done) {
      pollfd p{r->comm->fd, static_cast<short>(r->sent < r->out.size() ? POLLOUT : POLLIN), 0};
      poll(&p, 1, 5);
    }
  }
  const int status = r->status;
  delete r;
  return status;
}

__attribute__((visibility("default"))) int sharp_coll_req_free(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return SHARP_COLL_EINVAL;
  if (!r->done) {
    // Abandoned mid-flight: the stream to the aggregator is out of step for good.
    r->comm->error = SHARP_COLL_ERROR;
    r->comm->busy = false;
  }
  delete r;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) const char* sharp_coll_strerror(int error) {
  switch (error) {
    case SHARP_COLL_SUCCESS:
      return "Success (double)";
    case SHARP_COLL_EDEV:
      return "SHARP device error (double: the rail's port has no carrier)";
    case SHARP_COLL_ECONN_TREE:
      return "No connection to sharp tree (double: the aggregator closed the group)";
    case SHARP_COLL_ESESS_INIT:
      return "Cannot connect to SHARPD (double: NEZHA_SHARP_DOUBLE_AGGREGATOR unset or bad)";
    case SHARP_COLL_EOOB:
      return "Out-Of-Band collective error";
    case SHARP_COLL_EINVAL:
      return "Invalid value";
    case SHARP_COLL_ENOT_SUPP:
      return "Collective operation not supported";
    default:
      return "SHARP error (double)";
  }
}

}  // extern "C"
