// Test double of NVIDIA's libsharp_coll.so (TEST ONLY; loaded by the runtime's tests through
// NEZHA_SHARP_LIBRARY or LD_LIBRARY_PATH, never installed). The struct layouts are the runtime's
// declarations of the SHARP 3.x header (transport/sharp/sharp_api.h), its soname is the 3.x one
// (libsharp_coll.so.5; a second build, libsharp_coll.so.4, stands for an older library), so the
// runtime's real SHARP code path runs unchanged against it. docs/sharp.md lists what it models
// and what it does not.
//
// What it models, per the public API's contract:
//  - sharp_coll_default_config: the defaults callers copy (the double's own values; the real
//    library's are not published).
//  - sharp_coll_init: needs a device in the library's form, "<hca>:<port>" (ib_dev_list), and an
//    aggregation manager; the HCA's port is the network interface sysfs shows behind it
//    (double_support.h; a fixture tree under NEZHA_RDMA_SYSFS_ROOT), the aggregation node is
//    nezha-sharp-aggregator at NEZHA_SHARP_DOUBLE_AGGREGATOR=ip:port. Calls the out-of-band
//    barrier once, as the real library does during job creation.
//  - sharp_coll_caps_query: the fabric's SHARP generation, NEZHA_SHARP_DOUBLE_GENERATION=3
//    (default: every datatype) or 2 (no bfloat16/int8/uint8, as before SHARPv3); an allreduce
//    of a type the capabilities lack fails with SHARP_COLL_ENOT_SUPP.
//  - sharp_coll_comm_init: group creation over the out-of-band collectives (rank 0 draws the
//    group's nonce and broadcasts it, gathers every member's rank and checks them), then every
//    member joins the group at the aggregator over the SHARP rail (socket bound to the port's
//    interface) and waits until the whole group joined.
//  - sharp_coll_do_allreduce(_nb) / req_test / req_wait / req_free / progress / do_barrier: the
//    contribution goes to the aggregator, which reduces all members' contributions and sends
//    every member the result. Like an HCA, the double moves every outstanding request of the
//    context whenever the library is entered (any call), not only the one tested, so a reply
//    that arrives after the caller stopped waiting still completes its request and writes its
//    receive buffer. Freeing an unfinished request, deregistering memory an unfinished request
//    targets, and a completion into deregistered memory are counted (double_stats.h); the
//    double then drops the result rather than write memory the caller may have freed.
//  - Failures: the rail's port losing carrier (like IBV_EVENT_PORT_ERR under the real library)
//    completes pending and later operations with SHARP_COLL_EDEV; the aggregator closing the
//    group (a member vanished) gives SHARP_COLL_ECONN_TREE; a black-holed rail simply never
//    completes (the caller's progress timeout must catch it, as with the real library when
//    coll_timeout is infinite). sharp_coll_comm_destroy ends the group's unfinished requests;
//    sharp_coll_finalize reclaims every request and registration still held.
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "double_stats.h"
#include "double_support.h"
#include "transport/sharp/sharp_api.h"
#include "wire.h"

using namespace nezha::sharp;
namespace wire = nezha::sharpdouble;
using wire::Clock;

namespace {

struct Mr {
  char* ptr;
  size_t len;
  bool released = false;  // deregistered (kept until finalize so requests can tell)
};

struct Request;

}  // namespace

// The library's opaque handles, defined here (the runtime only ever sees pointers).
namespace nezha::sharp {
struct sharp_coll_context {
  uint64_t jobId = 0;
  int rank = 0, size = 0;
  std::string device, iface;
  int generation = 3;
  sockaddr_in aggregator{};
  sharp_coll_out_of_band_colls oob{};
  void* oobCtx = nullptr;
  std::vector<Request*> requests;  // every request not yet reclaimed
  std::vector<Mr*> mrs;            // every registration, released ones too
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

struct Request {
  sharp_coll_context* ctx;
  sharp_coll_comm* comm;  // null once its group was destroyed
  std::string out;        // header + payload still to send
  size_t sent = 0;
  wire::OpReply reply{};
  size_t replyGot = 0;
  std::string result;  // the reply's payload, delivered to dst at completion
  size_t resultGot = 0;
  char* dst;
  Mr* dstMr;  // null for the double's own buffers (barrier)
  bool done = false;
  bool freedUnfinished = false;  // the caller freed it before completion
  int status = SHARP_COLL_SUCCESS;
};

std::mutex statsMu;
wire::Stats stats{};

void count(uint64_t wire::Stats::*field) {
  std::lock_guard<std::mutex> lock(statsMu);
  ++(stats.*field);
}

void copyText(char (&dst)[64], const std::string& s) {
  std::snprintf(dst, sizeof(dst), "%s", s.c_str());
}

// Capabilities of the fabric's SHARP generation: 3 reduces every datatype, 2 not the SHARPv3
// ones. -1 for a value that is neither (the caller reports it).
int generationFromEnv() {
  const char* g = std::getenv("NEZHA_SHARP_DOUBLE_GENERATION");
  if (g == nullptr || *g == '\0' || std::strcmp(g, "3") == 0) return 3;
  if (std::strcmp(g, "2") == 0) return 2;
  return -1;
}

uint64_t dtypeMask(int generation) {
  uint64_t m = (uint64_t{1} << SHARP_DTYPE_NULL) - 1;
  if (generation < 3) {
    m &= ~((uint64_t{1} << SHARP_DTYPE_BFLOAT16) | (uint64_t{1} << SHARP_DTYPE_UINT8) |
           (uint64_t{1} << SHARP_DTYPE_INT8));
  }
  return m;
}

void removeRequest(sharp_coll_context* ctx, Request* r) {
  auto& v = ctx->requests;
  v.erase(std::remove(v.begin(), v.end(), r), v.end());
}

// Moves whatever the socket takes / gives now; completes the request when the reply is in.
void progress(Request& r) {
  if (r.done || r.comm == nullptr) return;
  sharp_coll_comm& c = *r.comm;
  auto finish = [&](int status) {
    r.done = true;
    r.status = status;
    if (status != SHARP_COLL_SUCCESS) c.error = status;
    c.busy = false;
    if (status != SHARP_COLL_SUCCESS) return;
    count(&wire::Stats::completions);
    if (r.dstMr != nullptr && r.dstMr->released) {
      count(&wire::Stats::completionsIntoReleasedMemory);
      return;
    }
    std::memcpy(r.dst, r.result.data(), r.result.size());
  };
  if (c.error != SHARP_COLL_SUCCESS) return finish(c.error);
  const auto now = Clock::now();
  if (now >= c.nextCarrierCheck) {
    c.nextCarrierCheck = now + std::chrono::milliseconds(5);
    if (!wire::carrierUp(c.ctx->iface)) return finish(SHARP_COLL_EDEV);
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
      if (r.reply.bytes != r.result.size()) return finish(SHARP_COLL_ERROR);
      if (r.resultGot == r.result.size()) {
        ++c.seq;
        return finish(SHARP_COLL_SUCCESS);
      }
      dst = r.result.data() + r.resultGot;
      want = r.result.size() - r.resultGot;
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

// The hardware view: every outstanding request of the context moves, whoever entered.
void progressAll(sharp_coll_context* ctx) {
  const std::vector<Request*> all = ctx->requests;
  for (Request* r : all) progress(*r);
  // A request freed unfinished is reclaimed once it ended.
  for (Request* r : all) {
    if (r->freedUnfinished && r->done) {
      removeRequest(ctx, r);
      delete r;
    }
  }
}

// Posts one allreduce of `bytes` from src; the result goes to dst (inside dstMr, or the
// double's own buffer when dstMr is null).
int post(sharp_coll_comm* comm, const sharp_coll_reduce_spec& spec, const char* src, char* dst,
         Mr* dstMr, size_t bytes, Request** out) {
  auto* r = new Request();
  r->ctx = comm->ctx;
  r->comm = comm;
  wire::OpHeader h{wire::kOpMagic, spec.dtype, spec.op, 0, comm->seq, spec.length, bytes};
  r->out.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  r->out.append(src, bytes);
  r->result.assign(bytes, '\0');
  r->dst = dst;
  r->dstMr = dstMr;
  comm->busy = true;
  comm->ctx->requests.push_back(r);
  progressAll(comm->ctx);
  *out = r;
  return SHARP_COLL_SUCCESS;
}

int waitAndRelease(Request* r) {
  while (!r->done && r->comm != nullptr) {
    progressAll(r->ctx);
    if (!r->done) {
      pollfd p{r->comm->fd, static_cast<short>(r->sent < r->out.size() ? POLLOUT : POLLIN), 0};
      poll(&p, 1, 5);
    }
  }
  const int status = r->done ? r->status : SHARP_COLL_ECONN_TREE;
  removeRequest(r->ctx, r);
  delete r;
  return status;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) extern const sharp_coll_config sharp_coll_default_config;
const sharp_coll_config sharp_coll_default_config = {nullptr, 128, 10000, 0, {0, 0, 0}};

__attribute__((visibility("default"))) int sharp_coll_init(sharp_coll_init_spec* spec,
                                                           sharp_coll_context** out) {
  if (spec == nullptr || out == nullptr || spec->world_size < 1 || spec->world_rank < 0 ||
      spec->world_rank >= spec->world_size || spec->oob_colls.barrier == nullptr ||
      spec->oob_colls.bcast == nullptr || spec->oob_colls.gather == nullptr) {
    return SHARP_COLL_EINVAL;
  }
  const std::string device = spec->config.ib_dev_list ? spec->config.ib_dev_list : "";
  const std::string iface = wire::interfaceOfDevice(device);
  {
    std::lock_guard<std::mutex> lock(statsMu);
    stats.lastWorldLocalRank = spec->world_local_rank;
    stats.lastUserProgressNumPolls = spec->config.user_progress_num_polls;
    stats.lastCollTimeout = spec->config.coll_timeout;
    copyText(stats.lastDevice, device);
    copyText(stats.lastInterface, iface);
  }
  const int generation = generationFromEnv();
  if (generation < 0) {
    std::fprintf(stderr, "sharp double: NEZHA_SHARP_DOUBLE_GENERATION=%s: want 2 or 3\n",
                 std::getenv("NEZHA_SHARP_DOUBLE_GENERATION"));
    return SHARP_COLL_EINVAL;
  }
  // The port must exist, in the library's "<hca>:<port>" form (an interface name is not one).
  if (iface.empty()) return SHARP_COLL_EDEV;
  auto* ctx = new sharp_coll_context();
  ctx->jobId = spec->job_id;
  ctx->rank = spec->world_rank;
  ctx->size = spec->world_size;
  ctx->device = device;
  ctx->iface = iface;
  ctx->generation = generation;
  ctx->oob = spec->oob_colls;
  ctx->oobCtx = spec->oob_ctx;
  if (!wire::parseAggregator(std::getenv("NEZHA_SHARP_DOUBLE_AGGREGATOR"), ctx->aggregator)) {
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
  if (ctx == nullptr) return SHARP_COLL_EINVAL;
  for (Request* r : ctx->requests) delete r;
  for (Mr* m : ctx->mrs) delete m;
  delete ctx;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_caps_query(sharp_coll_context* ctx,
                                                                 sharp_coll_caps* caps) {
  if (ctx == nullptr || caps == nullptr) return SHARP_COLL_EINVAL;
  *caps = sharp_coll_caps{};
  caps->sharp_pkt_version = ctx->generation;
  caps->support_mask.dtypes = dtypeMask(ctx->generation);
  caps->support_mask.reduce_ops =
      (uint64_t{1} << SHARP_OP_MAX) | (uint64_t{1} << SHARP_OP_MIN) | (uint64_t{1} << SHARP_OP_SUM);
  caps->resources.max_osts = 1;
  caps->resources.user_data_per_ost = static_cast<int>(wire::kMaxPayload);
  caps->resources.max_groups = 1;
  caps->resources.max_group_channels = 1;
  caps->resources.osts_per_group = 1;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_progress(sharp_coll_context* ctx) {
  if (ctx == nullptr) return SHARP_COLL_EINVAL;
  progressAll(ctx);
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_comm_init(sharp_coll_context* ctx,
                                                                sharp_coll_comm_init_spec* spec,
                                                                sharp_coll_comm** out) {
  if (ctx == nullptr || spec == nullptr || out == nullptr || spec->size != ctx->size ||
      spec->rank < 0 || spec->rank >= spec->size) {
    return SHARP_COLL_EINVAL;
  }
  {
    std::lock_guard<std::mutex> lock(statsMu);
    stats.lastGroupWorldRanksNull = spec->group_world_ranks == nullptr ? 1 : 0;
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
  if (!wire::carrierUp(ctx->iface)) return SHARP_COLL_EDEV;

  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SHARP_COLL_ENOMEM;
  auto fail = [fd](int status) {
    close(fd);
    return status;
  };
  // Over the SHARP rail only, like an HCA port.
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ctx->iface.c_str(),
                 static_cast<socklen_t>(ctx->iface.size())) != 0) {
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
  if (!wire::waitFd(fd, POLLOUT, deadline) ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &soLen) != 0 || soErr != 0) {
    return fail(SHARP_COLL_ECONN_TREE);
  }
  const wire::Hello hello{wire::kHelloMagic,
                          wire::kVersion,
                          ctx->jobId,
                          nonce,
                          static_cast<uint32_t>(spec->size),
                          static_cast<uint32_t>(spec->rank)};
  wire::HelloReply reply{};
  if (!wire::sendAll(fd, &hello, sizeof(hello), deadline) ||
      !wire::recvAll(fd, &reply, sizeof(reply), deadline) || reply.magic != wire::kReplyMagic) {
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
  // What already arrived still lands; then the group's unfinished requests end with it (the
  // context reclaims them at finalize).
  progressAll(comm->ctx);
  for (Request* r : comm->ctx->requests) {
    if (r->comm != comm) continue;
    if (!r->done) {
      r->done = true;
      r->status = SHARP_COLL_ECONN_TREE;
    }
    r->comm = nullptr;
  }
  close(comm->fd);
  delete comm;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_reg_mr(sharp_coll_context* ctx, void* buf,
                                                             size_t size, void** mr) {
  if (ctx == nullptr || buf == nullptr || size == 0 || mr == nullptr) return SHARP_COLL_EINVAL;
  auto* m = new Mr{static_cast<char*>(buf), size};
  ctx->mrs.push_back(m);
  *mr = m;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_dereg_mr(sharp_coll_context* ctx, void* mr) {
  if (ctx == nullptr || mr == nullptr) return SHARP_COLL_EINVAL;
  auto* m = static_cast<Mr*>(mr);
  if (std::find(ctx->mrs.begin(), ctx->mrs.end(), m) == ctx->mrs.end() || m->released) {
    return SHARP_COLL_EINVAL;
  }
  progressAll(ctx);
  for (const Request* r : ctx->requests) {
    if (!r->done && r->dstMr == m) count(&wire::Stats::deregsInFlight);
  }
  m->released = true;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_do_allreduce_nb(sharp_coll_comm* comm,
                                                                      sharp_coll_reduce_spec* spec,
                                                                      void** handle) {
  if (comm == nullptr || spec == nullptr || handle == nullptr || comm->busy) {
    return SHARP_COLL_EINVAL;
  }
  if (comm->error != SHARP_COLL_SUCCESS) return comm->error;
  const size_t es = wire::dtypeSize(spec->dtype);
  if (es == 0 || spec->op < SHARP_OP_MAX || spec->op >= SHARP_OP_NULL) return SHARP_COLL_EINVAL;
  if ((dtypeMask(comm->ctx->generation) & (uint64_t{1} << spec->dtype)) == 0) {
    count(&wire::Stats::unsupportedDatatypes);
    return SHARP_COLL_ENOT_SUPP;
  }
  const sharp_coll_data_desc& s = spec->sbuf_desc;
  const sharp_coll_data_desc& d = spec->rbuf_desc;
  const size_t bytes = spec->length * es;
  // Like the hardware path: host memory, contiguous, inside a live registered region.
  auto inside = [&](const sharp_coll_data_desc& b) {
    if (b.type != SHARP_DATA_BUFFER || b.mem_type != SHARP_MEM_TYPE_HOST) return false;
    const Mr* mr = static_cast<const Mr*>(b.buffer.mem_handle);
    const char* p = static_cast<const char*>(b.buffer.ptr);
    const auto& mrs = comm->ctx->mrs;
    return mr != nullptr && std::find(mrs.begin(), mrs.end(), mr) != mrs.end() && !mr->released &&
           p >= mr->ptr && b.buffer.length >= bytes && p + bytes <= mr->ptr + mr->len;
  };
  if (bytes == 0 || bytes > wire::kMaxPayload || !inside(s) || !inside(d)) return SHARP_COLL_EINVAL;
  Request* r = nullptr;
  const int st =
      post(comm, *spec, static_cast<const char*>(s.buffer.ptr), static_cast<char*>(d.buffer.ptr),
           static_cast<Mr*>(d.buffer.mem_handle), bytes, &r);
  *handle = r;
  return st;
}

__attribute__((visibility("default"))) int sharp_coll_req_test(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return 1;
  progressAll(r->ctx);
  return r->done ? 1 : 0;
}

__attribute__((visibility("default"))) int sharp_coll_req_wait(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return SHARP_COLL_EINVAL;
  return waitAndRelease(r);
}

__attribute__((visibility("default"))) int sharp_coll_req_free(void* handle) {
  auto* r = static_cast<Request*>(handle);
  if (r == nullptr) return SHARP_COLL_EINVAL;
  if (!r->done) {
    // The operation stays posted (the switch and the HCA do not know the caller gave up): it
    // is reclaimed when it ends, and its result still goes to the receive buffer.
    count(&wire::Stats::unfinishedFrees);
    r->freedUnfinished = true;
    return SHARP_COLL_SUCCESS;
  }
  removeRequest(r->ctx, r);
  delete r;
  return SHARP_COLL_SUCCESS;
}

__attribute__((visibility("default"))) int sharp_coll_do_allreduce(sharp_coll_comm* comm,
                                                                   sharp_coll_reduce_spec* spec) {
  void* handle = nullptr;
  const int st = sharp_coll_do_allreduce_nb(comm, spec, &handle);
  return st != SHARP_COLL_SUCCESS ? st : waitAndRelease(static_cast<Request*>(handle));
}

// A barrier is a one-integer sum over the group, in the double's own buffers.
__attribute__((visibility("default"))) int sharp_coll_do_barrier(sharp_coll_comm* comm) {
  if (comm == nullptr || comm->busy) return SHARP_COLL_EINVAL;
  if (comm->error != SHARP_COLL_SUCCESS) return comm->error;
  sharp_coll_reduce_spec spec{};
  spec.dtype = SHARP_DTYPE_INT;
  spec.op = SHARP_OP_SUM;
  spec.length = 1;
  int32_t one = 1, sum = 0;
  Request* r = nullptr;
  post(comm, spec, reinterpret_cast<const char*>(&one), reinterpret_cast<char*>(&sum), nullptr,
       sizeof(one), &r);
  return waitAndRelease(r);
}

__attribute__((visibility("default"))) const char* sharp_coll_strerror(int error) {
  switch (error) {
    case SHARP_COLL_SUCCESS:
      return "Success (double)";
    case SHARP_COLL_EDEV:
      return "SHARP device error (double: no \"<hca>:<port>\" with that name, or no carrier)";
    case SHARP_COLL_ECONN_TREE:
      return "No connection to sharp tree (double: the aggregator closed the group)";
    case SHARP_COLL_ESESS_INIT:
      return "Cannot connect to SHARPD (double: NEZHA_SHARP_DOUBLE_AGGREGATOR unset or bad)";
    case SHARP_COLL_EOOB:
      return "Out-Of-Band collective error";
    case SHARP_COLL_EINVAL:
      return "Invalid value";
    case SHARP_COLL_ENOT_SUPP:
      return "Collective operation not supported (double: not in the fabric's capabilities)";
    default:
      return "SHARP error (double)";
  }
}

// Test-only (double_stats.h).
__attribute__((visibility("default"))) void nezha_sharp_double_stats(wire::Stats* out) {
  std::lock_guard<std::mutex> lock(statsMu);
  *out = stats;
}

__attribute__((visibility("default"))) void nezha_sharp_double_reset() {
  std::lock_guard<std::mutex> lock(statsMu);
  stats = wire::Stats{};
}

}  // extern "C"
