// Ring allgather on one rail: in n-1 steps each rank forwards the block it received last
// (starting with its own) to its successor, so every block travels once around the ring.
#include "algorithms.h"

namespace nezha {

void allgatherRing(Channel& ch, char* base, size_t stride, size_t bytes) {
  const int n = ch.size(), r = ch.rank();
  if (n == 1 || bytes == 0) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    int sendB = (r - s + n) % n;
    int recvB = (r - s - 1 + 2 * n) % n;
    std::vector<IoOp> ops{IoOp::send(next, base + sendB * stride, bytes),
                          IoOp::recv(prev, base + recvB * stride, bytes)};
    ch.exchange(ops);
  }
}

}  // namespace nezha
