// Broadcast on one rail.
//
// Binomial tree (small messages): log2(n) rounds; in round k every rank that already has the
// data sends it to the rank 2^k further away (ranks counted from the root).
//
// Pipelined chain (large messages): ranks form a line starting at the root; each rank forwards
// bytes to its successor as soon as they arrive from its predecessor (a forwarding send gated
// on the receive), so all links are busy at once and the time approaches bytes/bandwidth.
#include "collectives/collectives.h"

namespace nezha {

void broadcast(Channel& ch, char* buf, size_t bytes, int root, const AlgoOptions& o) {
  if (ch.size() == 1 || bytes == 0) return;
  if (o.choose(OpKind::kBroadcast, bytes, ch.size()) == Algorithm::kPipelinedChain) {
    return broadcastPipelinedChain(ch, buf, bytes, root);
  }
  broadcastBinomialTree(ch, buf, bytes, root);
}

void broadcastBinomialTree(Channel& ch, char* buf, size_t bytes, int root) {
  const int n = ch.size();
  const int vrank = (ch.rank() - root + n) % n;
  auto real = [&](int v) { return (v + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      std::vector<IoOp> ops{IoOp::recv(real(vrank - mask), buf, bytes)};
      ch.exchange(ops);
      break;
    }
    mask <<= 1;
  }
  std::vector<IoOp> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) sends.push_back(IoOp::send(real(vrank + mask), buf, bytes));
  }
  ch.exchange(sends);
}

void broadcastPipelinedChain(Channel& ch, char* buf, size_t bytes, int root) {
  const int n = ch.size();
  const int vrank = (ch.rank() - root + n) % n;
  const int prev = (ch.rank() + n - 1) % n, next = (ch.rank() + 1) % n;
  std::vector<IoOp> ops;
  ops.reserve(2);  // the forward's gate points into ops
  if (vrank == 0) {
    ops.push_back(IoOp::send(next, buf, bytes));
  } else {
    ops.push_back(IoOp::recv(prev, buf, bytes));
    if (vrank < n - 1) ops.push_back(IoOp::forward(next, buf, bytes, 1, &ops[0]));
  }
  ch.exchange(ops);
}

}  // namespace nezha
