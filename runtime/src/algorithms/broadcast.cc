// Broadcast on one rail.
//
// Binomial tree (small messages): log2(n) rounds; in round k every rank that already has the
// data sends it to the rank 2^k further away (ranks counted from the root).
//
// Pipelined chain (large messages): ranks form a line starting at the root; the message is cut
// into segments and each rank forwards segment k-1 to its successor while receiving segment k,
// so all links are busy at once and the time approaches bytes/bandwidth.
#include "algorithms.h"

namespace nezha {

BroadcastAlgorithm chooseBroadcast(size_t bytes, int ranks, const AlgoOptions& o) {
  if (ranks <= 2 || bytes <= o.segmentBytes) return BroadcastAlgorithm::kBinomialTree;
  return BroadcastAlgorithm::kPipelinedChain;
}

void broadcast(Channel& ch, char* buf, size_t bytes, int root, const AlgoOptions& o) {
  if (ch.size() == 1 || bytes == 0) return;
  switch (chooseBroadcast(bytes, ch.size(), o)) {
    case BroadcastAlgorithm::kBinomialTree:
      return broadcastBinomialTree(ch, buf, bytes, root);
    case BroadcastAlgorithm::kPipelinedChain:
      return broadcastPipelinedChain(ch, buf, bytes, root, o.segmentBytes);
  }
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

void broadcastPipelinedChain(Channel& ch, char* buf, size_t bytes, int root, size_t segment) {
  const int n = ch.size();
  const int vrank = (ch.rank() - root + n) % n;
  const int prev = (ch.rank() + n - 1) % n, next = (ch.rank() + 1) % n;
  const bool hasNext = vrank < n - 1;
  const size_t nseg = (bytes + segment - 1) / segment;
  auto seg = [&](size_t k) { return buf + k * segment; };
  auto segLen = [&](size_t k) { return std::min(segment, bytes - k * segment); };
  if (vrank == 0) {
    for (size_t k = 0; k < nseg; ++k) {
      std::vector<IoOp> ops{IoOp::send(next, seg(k), segLen(k))};
      ch.exchange(ops);
    }
    return;
  }
  for (size_t k = 0; k <= nseg; ++k) {
    std::vector<IoOp> ops;
    if (k < nseg) ops.push_back(IoOp::recv(prev, seg(k), segLen(k)));
    if (hasNext && k >= 1) ops.push_back(IoOp::send(next, seg(k - 1), segLen(k - 1)));
    ch.exchange(ops);
  }
}

}  // namespace nezha
