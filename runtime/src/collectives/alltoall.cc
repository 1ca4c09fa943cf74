// Alltoall on one rail: every message goes straight from its sender to its receiver, once.
//
// Pairwise exchange (large messages among many ranks): n-1 steps; in step s rank r sends to
// r+s and receives from r-s, so every rank talks to exactly one peer in each direction at a
// time and its link is never shared by n-1 streams converging on it (incast). Steps are
// separate exchanges (the step barrier is the point: it bounds what is in flight per rank).
//
// Direct (small messages, few ranks): every send and receive posted in one exchange: one round
// of latency instead of n-1; with few peers the link is best kept full by all of them at once.
//
// Each rail carries only its part of each message (messagePart), so the same two functions
// run a cold operation whole on one rail and a hot one split across rails.
#include "collectives/collectives.h"

namespace nezha {

std::pair<size_t, size_t> messagePart(size_t count, size_t a, size_t b, size_t units) {
  if (units == 0) return {0, 0};
  __extension__ typedef unsigned __int128 u128;  // count * u needs up to 100 bits
  auto at = [&](size_t u) { return static_cast<size_t>(u128(count) * u / units); };
  return {at(a), at(b)};
}

namespace {
// The send to `peer` and the receive from `peer` of this slice (empty parts are left out on
// both ends alike: both compute the same lengths from the same counts).
void postPeer(const AlltoallLayout& l, int peer, size_t a, size_t b, std::vector<IoOp>& ops) {
  const size_t es = l.elemSize, p = static_cast<size_t>(peer);
  const auto [sb, se] = messagePart(l.sendCount[p], a, b, l.units);
  if (se > sb) {
    ops.push_back(IoOp::send(peer, l.send + (l.sendDispl[p] + sb) * es, (se - sb) * es, es));
  }
  const auto [rb, re] = messagePart(l.recvCount[p], a, b, l.units);
  if (re > rb) {
    ops.push_back(IoOp::recv(peer, l.recv + (l.recvDispl[p] + rb) * es, (re - rb) * es, es));
  }
}
}  // namespace

void alltoall(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount,
              const AlgoOptions& o) {
  if (ch.size() == 1 || unitCount == 0) return;
  if (o.choose(OpKind::kAlltoall, unitCount * l.unitBytes, ch.size()) == Algorithm::kPairwise) {
    return alltoallPairwise(ch, l, unitBegin, unitCount);
  }
  alltoallDirect(ch, l, unitBegin, unitCount);
}

void alltoallPairwise(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount) {
  const int n = ch.size(), r = ch.rank();
  const size_t a = unitBegin, b = unitBegin + unitCount, es = l.elemSize;
  std::vector<IoOp> ops;
  for (int s = 1; s < n; ++s) {
    const size_t to = static_cast<size_t>((r + s) % n), from = static_cast<size_t>((r - s + n) % n);
    ops.clear();
    const auto [sb, se] = messagePart(l.sendCount[to], a, b, l.units);
    if (se > sb) {
      ops.push_back(IoOp::send(static_cast<int>(to), l.send + (l.sendDispl[to] + sb) * es,
                               (se - sb) * es, es));
    }
    const auto [rb, re] = messagePart(l.recvCount[from], a, b, l.units);
    if (re > rb) {
      ops.push_back(IoOp::recv(static_cast<int>(from), l.recv + (l.recvDispl[from] + rb) * es,
                               (re - rb) * es, es));
    }
    ch.exchange(ops);
  }
}

void alltoallDirect(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount) {
  const int n = ch.size(), r = ch.rank();
  std::vector<IoOp> ops;
  ops.reserve(2 * static_cast<size_t>(n - 1));
  // Peers in the pairwise order, so the first bytes on every link go to different ranks.
  for (int s = 1; s < n; ++s) postPeer(l, (r + s) % n, unitBegin, unitBegin + unitCount, ops);
  ch.exchange(ops);
}

}  // namespace nezha
