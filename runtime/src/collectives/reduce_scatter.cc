// Ring reduce-scatter on one rail. Step s: send the partial sum of block r-s-1 to the
// successor, receive the predecessor's partial sum of block r-s-2 and fold our own input into
// it. After n-1 steps the block that arrives last is block r itself, now reduced over all
// ranks, and it is written straight to the output. The input is never modified: partial sums
// live in scratch blocks, one per step, and are forwarded as soon as they are reduced.
#include <cstring>

#include "base/reduce.h"
#include "collectives/collectives.h"

namespace nezha {

void reduceScatter(Channel& ch, const char* in, size_t inStride, char* out, size_t count,
                   DataType dt, ReduceOp op, Scratch& scratch, const AlgoOptions& o) {
  // Ring is the one reduce_scatter today; the table (collectives/algorithm.h) admits only it.
  (void)o;
  reduceScatterRing(ch, in, inStride, out, count, dt, op, scratch);
}

void reduceScatterRing(Channel& ch, const char* in, size_t inStride, char* out, size_t count,
                       DataType dt, ReduceOp op, Scratch& scratch) {
  const int n = ch.size(), r = ch.rank();
  const size_t es = dataTypeSize(dt), bytes = count * es;
  if (n == 1) {
    if (out != in) std::memmove(out, in, bytes);
    return;
  }
  if (count == 0) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // One landing block per step: all steps run in one exchange, so no block is reused while a
  // slower stream may still be writing into it.
  char* partials = scratch.get(1, bytes * static_cast<size_t>(n - 1));
  std::vector<IoOp> ops;
  ops.reserve(2 * static_cast<size_t>(n - 1));  // gates point into ops: no reallocation
  const IoOp* lastRecv = nullptr;
  const char* sendFrom = in + static_cast<size_t>((r - 1 + n) % n) * inStride;
  for (int s = 0; s < n - 1; ++s) {
    int recvB = (r - s - 2 + 2 * n) % n;
    const char* mine = in + static_cast<size_t>(recvB) * inStride;
    char* land = partials + static_cast<size_t>(s) * bytes;
    bool last = s == n - 2;
    ops.push_back(IoOp::forward(next, sendFrom, bytes, es, lastRecv));
    // land = (their partial) op (our input). The last block is ours: write it to out instead
    // (memmove: out may be our own input block for in-place reduce_scatter).
    ops.push_back(IoOp::recv(prev, land, bytes, es, [=](size_t off, size_t len) {
      if (last) {
        reduceInto(land + off, mine + off, len / es, dt, op);
        std::memmove(out + off, land + off, len);
      } else {
        reduceInto(land + off, mine + off, len / es, dt, op);
      }
    }));
    lastRecv = &ops.back();
    sendFrom = land;
  }
  ch.exchange(ops);
}

}  // namespace nezha
