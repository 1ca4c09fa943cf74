// Rooted collectives (reduce, gather, scatter) composed from the multi-rail collectives in
// communicator.cc (alltoall/alltoallv have their own data path: communicator_alltoall.cc).
// Composition is the point: every byte still moves through an operation the scheduler splits across
// rails and the failover layer replays on survivors, so these inherit both properties without a
// second code path. The price is bandwidth (see nezha.hpp); the validation below makes bad
// arguments an error on every rank instead of a hang on some.
#include <cstring>
#include <vector>

#include "base/error.h"
#include "nezha/nezha.hpp"

namespace nezha {

namespace {

void checkRoot(const char* op, int root, int worldSize) {
  if (root < 0 || root >= worldSize) {
    throw InvalidArgument(strCat(op, ": root ", root, " outside world size ", worldSize));
  }
}

void checkBuffer(const char* op, const char* which, const void* p, size_t count) {
  if (count > 0 && p == nullptr) {
    throw InvalidArgument(strCat(op, ": null ", which, " with count ", count));
  }
  if (count > (size_t(1) << 50)) throw InvalidArgument(strCat(op, ": count ", count, " too large"));
}

}  // namespace

void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          ReduceOp op, int root) {
  checkRoot("reduce", root, worldSize());
  checkBuffer("reduce", "sendbuf", sendbuf, count);
  if (rank() == root) {
    checkBuffer("reduce", "recvbuf", recvbuf, count);
    allreduce(sendbuf, recvbuf, count, dtype, op);
    return;
  }
  std::vector<char> discard(count * dataTypeSize(dtype));
  allreduce(sendbuf, discard.data(), count, dtype, op);
}

void Communicator::gather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          int root) {
  checkRoot("gather", root, worldSize());
  checkBuffer("gather", "sendbuf", sendbuf, count);
  const size_t total = count * static_cast<size_t>(worldSize());
  if (rank() == root) {
    checkBuffer("gather", "recvbuf", recvbuf, total);
    allgather(sendbuf, recvbuf, count, dtype);
    return;
  }
  std::vector<char> discard(total * dataTypeSize(dtype));
  allgather(sendbuf, discard.data(), count, dtype);
}

void Communicator::scatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                           int root) {
  checkRoot("scatter", root, worldSize());
  checkBuffer("scatter", "recvbuf", recvbuf, count);
  const size_t es = dataTypeSize(dtype);
  const size_t total = count * static_cast<size_t>(worldSize());
  std::vector<char> all(total * es);
  if (rank() == root) {
    checkBuffer("scatter", "sendbuf", sendbuf, total);
    if (total) std::memcpy(all.data(), sendbuf, total * es);
  }
  broadcast(all.data(), total, dtype, root);
  if (count) {
    std::memmove(recvbuf, all.data() + static_cast<size_t>(rank()) * count * es, count * es);
  }
}

}  // namespace nezha
