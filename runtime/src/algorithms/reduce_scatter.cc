// Ring reduce-scatter on one rail. Step s: send the partial sum of block r-s-1 to the
// successor, receive the predecessor's partial sum of block r-s-2 and fold our own input into
// it. After n-1 steps the block that arrives last is block r itself, now reduced over all
// ranks, and it is written straight to the output. The input is never modified: partial sums
// live in two alternating scratch blocks.
#include <cstring>

#include "algorithms.h"
#include "reduce.h"

namespace nezha {

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
  char* tmp = scratch.get(0, bytes);
  char* partial[2] = {scratch.get(1, bytes), scratch.get(2, bytes)};
  const char* sendFrom = in + static_cast<size_t>((r - 1 + n) % n) * inStride;
  for (int s = 0; s < n - 1; ++s) {
    int recvB = (r - s - 2 + 2 * n) % n;
    const char* mine = in + static_cast<size_t>(recvB) * inStride;
    char* dst = s == n - 2 ? out : partial[s % 2];
    std::vector<IoOp> ops;
    ops.push_back(IoOp::send(next, sendFrom, bytes, es));
    // dst = (our input) op (their partial), built as the partial arrives. memmove: on the last
    // step dst may be our own input block (in-place reduce_scatter), then it is a no-op.
    ops.push_back(IoOp::recv(prev, tmp, bytes, es, [&](size_t off, size_t len) {
      if (dst + off != mine + off) std::memmove(dst + off, mine + off, len);
      reduceInto(dst + off, tmp + off, len / es, dt, op);
    }));
    ch.exchange(ops);
    sendFrom = dst;
  }
}

}  // namespace nezha
