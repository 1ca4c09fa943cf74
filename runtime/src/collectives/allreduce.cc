// Allreduce on one rail.
//
// Ring (bandwidth-optimal, for large slices): the slice is cut into n chunks. Reduce-scatter:
// in n-1 steps every rank sends one chunk to its successor while receiving another from its
// predecessor and folding it in as bytes arrive; after it rank r owns the fully reduced chunk
// r+1. Allgather: n-1 more steps circulate the reduced chunks. Each rank sends 2(n-1)/n of the
// slice. The steps are not separated by barriers: data is forwarded as soon as it is reduced.
//
// Which one runs is the algorithm table's choice (collectives/algorithm.h); halving/doubling
// (Rabenseifner) lives in allreduce_halving_doubling.cc.
//
// Recursive doubling (latency-optimal, for small slices): log2(p) rounds of whole-buffer
// exchanges with partner rank^mask. For n not a power of two, the first 2*(n-p) ranks pair up
// first: even ones hand their data to their odd neighbour, sit out, and get the result back
// at the end.
#include <cstring>

#include "base/error.h"
#include "base/reduce.h"
#include "collectives/collectives.h"
#include "collectives/power_of_two_fold.h"

namespace nezha {

void allreduce(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op, Scratch& scratch,
               const AlgoOptions& o) {
  allreduce(ch, buf, buf, count, dt, op, scratch, o);
}

void allreduce(Channel& ch, const char* in, char* out, size_t count, DataType dt, ReduceOp op,
               Scratch& scratch, const AlgoOptions& o) {
  // A rail that reduces in the network (SHARP) does the whole operation itself.
  if (CollectiveOffload* off = ch.offload(); off != nullptr && off->supports(dt, op) && count > 0) {
    return off->allreduce(in, out, count, dt, op);
  }
  const size_t es = dataTypeSize(dt);
  const int n = ch.size();
  Algorithm algo = o.choose(OpKind::kAllreduce, count * es, n);
  // Ring and halving/doubling give every rank a block: with fewer elements than ranks they
  // would move empty blocks, so such tiny slices take recursive doubling (all ranks alike).
  if (algo != Algorithm::kRecursiveDoubling && count < static_cast<size_t>(n)) {
    algo = Algorithm::kRecursiveDoubling;
  }
  if (n > 1 && count > 0 && algo == Algorithm::kRing) {
    return allreduceRing(ch, in, out, count, dt, op, scratch);
  }
  if (in != out && count > 0) std::memcpy(out, in, count * es);
  if (n == 1 || count == 0) return;
  if (algo == Algorithm::kHalvingDoubling) {
    return allreduceHalvingDoubling(ch, out, count, dt, op, scratch);
  }
  allreduceRecursiveDoubling(ch, out, count, dt, op, scratch);
}

void allreduceRing(Channel& ch, const char* in, char* out, size_t count, DataType dt, ReduceOp op,
                   Scratch& scratch) {
  const int n = ch.size(), r = ch.rank();
  const size_t es = dataTypeSize(dt);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto begin = [&](int c) { return count * static_cast<size_t>(c) / n; };
  auto len = [&](int c) { return begin(c + 1) - begin(c); };
  // Each chunk is received at most once during reduce-scatter, so it gets its own landing
  // area at its own offset and no step waits for another to free a buffer.
  char* tmp = scratch.get(0, count * es);

  // All 2(n-1) steps go into one exchange. Every send after the first forwards the chunk
  // received in the previous step (same chunk, same length) and is gated on it, so bytes move
  // on as soon as they are reduced and the socket buffers never drain between steps.
  std::vector<IoOp> ops;
  ops.reserve(4 * static_cast<size_t>(n - 1));  // gates point into ops: no reallocation
  // Out of place, nothing copies the input first: step 0 sends this rank's chunk straight from
  // `in`, each reduce-scatter receive writes out = in (op) received (the same combination as
  // in place), and the allgather fills the rest of `out`. Every chunk of `out` is written:
  // reduce-scatter covers all but chunk r, the allgather all but chunk r+1.
  const bool apart = in != out;
  const IoOp* lastRecv = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    int sendC = (r - s + n) % n;
    int recvC = (r - s - 1 + 2 * n) % n;
    const char* from = (s == 0 ? in : out) + begin(sendC) * es;
    ops.push_back(IoOp::forward(next, from, len(sendC) * es, es, lastRecv));
    char* dst = out + begin(recvC) * es;
    const char* mine = in + begin(recvC) * es;
    char* land = tmp + begin(recvC) * es;
    ops.push_back(IoOp::recv(prev, land, len(recvC) * es, es, [=](size_t off, size_t bytes) {
      if (apart) {
        reduceOutOfPlace(dst + off, mine + off, land + off, bytes / es, dt, op);
      } else {
        reduceInto(dst + off, land + off, bytes / es, dt, op);
      }
    }));
    lastRecv = &ops.back();
  }
  for (int s = 0; s < n - 1; ++s) {
    int sendC = (r + 1 - s + n) % n;
    int recvC = (r - s + n) % n;
    ops.push_back(IoOp::forward(next, out + begin(sendC) * es, len(sendC) * es, es, lastRecv));
    ops.push_back(IoOp::recv(prev, out + begin(recvC) * es, len(recvC) * es, es));
    lastRecv = &ops.back();
  }
  ch.exchange(ops);
}

// buf = lower-ranked operand (op) higher-ranked operand, so both partners combine the same way
// even where the operation is not commutative bit for bit (min/max with NaN).
static void combineOrdered(char* buf, char* theirs, size_t count, DataType dt, ReduceOp op,
                           bool theirsFirst) {
  if (theirsFirst) {
    reduceInto(theirs, buf, count, dt, op);
    std::memcpy(buf, theirs, count * dataTypeSize(dt));
  } else {
    reduceInto(buf, theirs, count, dt, op);
  }
}

void allreduceRecursiveDoubling(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op,
                                Scratch& scratch) {
  const int n = ch.size(), r = ch.rank();
  const size_t es = dataTypeSize(dt), bytes = count * es;
  const PowerOfTwoFold fold(n);
  const int p = fold.p;
  char* tmp = scratch.get(0, bytes);

  if (fold.folded(r)) {
    if (r % 2 == 0) {
      std::vector<IoOp> ops{IoOp::send(r + 1, buf, bytes, es)};
      ch.exchange(ops);
    } else {
      std::vector<IoOp> ops{IoOp::recv(r - 1, tmp, bytes, es)};
      ch.exchange(ops);
      combineOrdered(buf, tmp, count, dt, op, true);
    }
  }
  const int vrank = fold.participant(r);  // -1 if sitting out
  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      int pv = vrank ^ mask;
      int partner = fold.real(pv);
      std::vector<IoOp> ops{IoOp::send(partner, buf, bytes, es),
                            IoOp::recv(partner, tmp, bytes, es)};
      ch.exchange(ops);
      combineOrdered(buf, tmp, count, dt, op, partner < r);
    }
  }
  fold.unfold(ch, r, buf, bytes, es);
}

}  // namespace nezha
