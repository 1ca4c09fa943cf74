// Ring allgather on one rail: in n-1 steps each rank forwards the block it received last
// (starting with its own) to its successor, so every block travels once around the ring.
#include "collectives/collectives.h"

namespace nezha {

void allgather(Channel& ch, char* base, size_t stride, size_t bytes, const AlgoOptions& o) {
  // Ring is the one allgather today; the table (collectives/algorithm.h) admits only it.
  (void)o;
  allgatherRing(ch, base, stride, bytes);
}

void allgatherRing(Channel& ch, char* base, size_t stride, size_t bytes) {
  const int n = ch.size(), r = ch.rank();
  if (n == 1 || bytes == 0) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // One exchange; each step forwards the block received in the previous one as it arrives.
  std::vector<IoOp> ops;
  ops.reserve(2 * static_cast<size_t>(n - 1));  // gates point into ops: no reallocation
  const IoOp* lastRecv = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    int sendB = (r - s + n) % n;
    int recvB = (r - s - 1 + 2 * n) % n;
    ops.push_back(IoOp::forward(next, base + sendB * stride, bytes, 1, lastRecv));
    ops.push_back(IoOp::recv(prev, base + recvB * stride, bytes));
    lastRecv = &ops.back();
  }
  ch.exchange(ops);
}

}  // namespace nezha
