// C API over the C++ Communicator: exceptions become status codes plus a thread-local message.
#include <string>

#include "failover/op_header.h"
#include "nezha/nezha.h"
#include "nezha/nezha.hpp"

static_assert(NEZHA_OP_SIGNATURE_MAX == nezha::kOpSignatureBytes,
              "nezha.h promises the signed header's room for a signature");

struct nezha_comm {
  std::unique_ptr<nezha::Communicator> comm;
};

namespace {
thread_local std::string lastError;

template <typename F>
nezha_status_t guard(F&& f) {
  try {
    lastError.clear();
    f();
    return NEZHA_OK;
  } catch (const nezha::MismatchError& e) {
    lastError = e.what();
    return NEZHA_ERR_MISMATCH;
  } catch (const nezha::ConfigError& e) {
    lastError = e.what();
    return NEZHA_ERR_CONFIG;
  } catch (const nezha::AuthError& e) {
    lastError = e.what();
    return NEZHA_ERR_AUTH;
  } catch (const nezha::RailError& e) {
    lastError = e.what();
    return NEZHA_ERR_RAIL;
  } catch (const nezha::InvalidArgument& e) {
    lastError = e.what();
    return NEZHA_ERR_INVALID;
  } catch (const std::exception& e) {
    lastError = e.what();
    return NEZHA_ERR_INTERNAL;
  }
}

bool validDtype(nezha_dtype_t d) { return d >= NEZHA_FLOAT32 && d <= NEZHA_INT64; }
bool validOp(nezha_op_t o) { return o >= NEZHA_SUM && o <= NEZHA_MAX; }

nezha::Communicator& get(nezha_comm_t c) {
  if (c == nullptr || !c->comm) throw nezha::InvalidArgument("null communicator");
  return *c->comm;
}
nezha::DataType dt(nezha_dtype_t d) {
  if (!validDtype(d)) throw nezha::InvalidArgument("unknown dtype " + std::to_string(d));
  return static_cast<nezha::DataType>(d);
}
nezha::ReduceOp rop(nezha_op_t o) {
  if (!validOp(o)) throw nezha::InvalidArgument("unknown reduce op " + std::to_string(o));
  return static_cast<nezha::ReduceOp>(o);
}
}  // namespace

extern "C" {

nezha_status_t nezha_init_from_env(nezha_comm_t* out) {
  return guard([&] {
    if (out == nullptr) throw nezha::InvalidArgument("nezha_init_from_env: null output");
    *out = nullptr;
    auto c = std::make_unique<nezha_comm>();
    c->comm = std::make_unique<nezha::Communicator>(nezha::Options::fromEnv());
    *out = c.release();
  });
}

void nezha_destroy(nezha_comm_t comm) { delete comm; }

int nezha_rank(nezha_comm_t comm) { return comm && comm->comm ? comm->comm->rank() : -1; }
int nezha_world_size(nezha_comm_t comm) {
  return comm && comm->comm ? comm->comm->worldSize() : -1;
}

nezha_status_t nezha_allreduce(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                               nezha_dtype_t dtype, nezha_op_t op) {
  return guard([&] { get(comm).allreduce(sendbuf, recvbuf, count, dt(dtype), rop(op)); });
}

nezha_status_t nezha_broadcast(nezha_comm_t comm, void* buf, size_t count, nezha_dtype_t dtype,
                               int root) {
  return guard([&] { get(comm).broadcast(buf, count, dt(dtype), root); });
}

nezha_status_t nezha_allgather(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                               nezha_dtype_t dtype) {
  return guard([&] { get(comm).allgather(sendbuf, recvbuf, count, dt(dtype)); });
}

nezha_status_t nezha_reduce_scatter(nezha_comm_t comm, const void* sendbuf, void* recvbuf,
                                    size_t recvcount, nezha_dtype_t dtype, nezha_op_t op) {
  return guard([&] { get(comm).reduceScatter(sendbuf, recvbuf, recvcount, dt(dtype), rop(op)); });
}

nezha_status_t nezha_barrier(nezha_comm_t comm) {
  return guard([&] { get(comm).barrier(); });
}

nezha_status_t nezha_reduce(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                            nezha_dtype_t dtype, nezha_op_t op, int root) {
  return guard([&] { get(comm).reduce(sendbuf, recvbuf, count, dt(dtype), rop(op), root); });
}

nezha_status_t nezha_gather(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                            nezha_dtype_t dtype, int root) {
  return guard([&] { get(comm).gather(sendbuf, recvbuf, count, dt(dtype), root); });
}

nezha_status_t nezha_scatter(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                             nezha_dtype_t dtype, int root) {
  return guard([&] { get(comm).scatter(sendbuf, recvbuf, count, dt(dtype), root); });
}

nezha_status_t nezha_alltoall(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                              nezha_dtype_t dtype) {
  return guard([&] { get(comm).alltoall(sendbuf, recvbuf, count, dt(dtype)); });
}

nezha_status_t nezha_alltoallv(nezha_comm_t comm, const void* sendbuf, const size_t* sendcounts,
                               const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                               const size_t* rdispls, nezha_dtype_t dtype) {
  return guard([&] {
    get(comm).alltoallv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dt(dtype));
  });
}

nezha_status_t nezha_sign_next_op(nezha_comm_t comm, const void* bytes, size_t length) {
  // Communicator::signNextOp refuses null bytes and signatures over the header's room.
  return guard([&] { get(comm).signNextOp(bytes, length); });
}

nezha_status_t nezha_save_table(nezha_comm_t comm, const char* path) {
  return guard([&] {
    if (path == nullptr) throw nezha::InvalidArgument("nezha_save_table: null path");
    get(comm).saveTable(path);
  });
}

const char* nezha_last_error(void) { return lastError.c_str(); }

int nezha_api_version(void) { return NEZHA_API_VERSION; }

}  // extern "C"
