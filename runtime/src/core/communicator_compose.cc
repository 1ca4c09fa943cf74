// Rooted and personalized collectives (reduce, gather, scatter, alltoallv) composed from the
// multi-rail collectives in communicator.cc. Composition is the point: every byte still moves
// through an operation the scheduler splits across rails and the failover layer replays on
// survivors, so these inherit both properties without a second code path. The price is
// bandwidth (see nezha.hpp); the validation below makes bad arguments an error on every rank
// instead of a hang on some.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
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

void Communicator::alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                             DataType dtype) {
  const int n = worldSize();
  const size_t un = static_cast<size_t>(n);
  const int me = rank();
  if (!sendcounts || !sdispls || !recvcounts || !rdispls) {
    throw InvalidArgument("alltoallv: null counts or displacements");
  }
  const size_t es = dataTypeSize(dtype);
  // Round 1: every rank's send counts (n x n int64), so each rank can check its receive counts
  // and find its pieces. A local argument error is carried in the same round (count -1) so
  // that every rank fails together instead of some waiting in round 2.
  std::vector<int64_t> mine(un), counts(un * un);
  std::string localError;
  size_t packed = 0;
  for (size_t p = 0; p < un; ++p) {
    if (sendcounts[p] > (size_t(1) << 50) || recvcounts[p] > (size_t(1) << 50)) {
      localError = strCat("alltoallv: count for rank ", p, " too large");
    }
    mine[p] = static_cast<int64_t>(sendcounts[p]);
    packed += sendcounts[p];
  }
  if (packed > 0 && sendbuf == nullptr) localError = "alltoallv: null sendbuf";
  size_t received = 0;
  for (size_t p = 0; p < un; ++p) received += recvcounts[p];
  if (received > 0 && recvbuf == nullptr) localError = "alltoallv: null recvbuf";
  if (!localError.empty()) std::fill(mine.begin(), mine.end(), -1);
  allgather(mine.data(), counts.data(), un, DataType::kInt64);
  auto sent = [&](size_t from, size_t to) { return counts[from * un + to]; };
  for (size_t p = 0; p < un; ++p) {
    if (sent(p, 0) < 0) {
      throw InvalidArgument(localError.empty()
                                ? strCat("alltoallv: rank ", p, " passed invalid arguments")
                                : localError);
    }
  }
  for (size_t p = 0; p < un; ++p) {
    if (static_cast<size_t>(sent(p, me)) != recvcounts[p]) {
      localError = strCat("alltoallv: rank ", me, " expects ", recvcounts[p],
                          " elements from rank ", p, ", which sends ", sent(p, me));
    }
  }
  // Agree on the failure (1 int) so every rank throws, not just the one that noticed.
  int64_t bad = localError.empty() ? 0 : 1;
  allreduce(&bad, &bad, 1, DataType::kInt64, ReduceOp::kMax);
  if (bad) {
    throw InvalidArgument(localError.empty()
                              ? "alltoallv: receive counts disagree with a peer's send counts"
                              : localError);
  }
  // Round 2: every rank's send buffer packed in rank order and padded to the largest.
  size_t widest = 0;
  for (size_t p = 0; p < un; ++p) {
    size_t total = 0;
    for (size_t q = 0; q < un; ++q) total += static_cast<size_t>(sent(p, q));
    widest = std::max(widest, total);
  }
  if (widest == 0) return;
  std::vector<char> pack(widest * es), all(widest * es * un);
  const char* in = static_cast<const char*>(sendbuf);
  size_t off = 0;
  for (size_t p = 0; p < un; ++p) {
    if (sendcounts[p])
      std::memcpy(pack.data() + off * es, in + sdispls[p] * es, sendcounts[p] * es);
    off += sendcounts[p];
  }
  allgather(pack.data(), all.data(), widest, dtype);
  char* out = static_cast<char*>(recvbuf);
  for (size_t p = 0; p < un; ++p) {
    size_t at = 0;  // where rank p's piece for me starts in its packed buffer
    for (size_t q = 0; q < static_cast<size_t>(me); ++q) at += static_cast<size_t>(sent(p, q));
    if (recvcounts[p]) {
      std::memcpy(out + rdispls[p] * es, all.data() + (p * widest + at) * es, recvcounts[p] * es);
    }
  }
}

}  // namespace nezha
