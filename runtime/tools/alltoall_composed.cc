// The old composed alltoallv, verbatim but for the public-API calls (see the header).
#include "alltoall_composed.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"

namespace nezha::tools {

void composedAlltoallv(Communicator& c, const void* sendbuf, const size_t* sendcounts,
                       const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                       const size_t* rdispls, DataType dtype) {
  const int n = c.worldSize();
  const size_t un = static_cast<size_t>(n);
  const int me = c.rank();
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
  c.allgather(mine.data(), counts.data(), un, DataType::kInt64);
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
  c.allreduce(&bad, &bad, 1, DataType::kInt64, ReduceOp::kMax);
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
  c.allgather(pack.data(), all.data(), widest, dtype);
  char* out = static_cast<char*>(recvbuf);
  for (size_t p = 0; p < un; ++p) {
    size_t at = 0;  // where rank p's piece for me starts in its packed buffer
    for (size_t q = 0; q < static_cast<size_t>(me); ++q) at += static_cast<size_t>(sent(p, q));
    if (recvcounts[p]) {
      std::memcpy(out + rdispls[p] * es, all.data() + (p * widest + at) * es, recvcounts[p] * es);
    }
  }
}

}  // namespace nezha::tools
