#include "transport/peer_set.h"

#include <algorithm>
#include <cstdint>

namespace nezha {

namespace {
int ceilLog2Of(int n) {
  int steps = 0;
  while ((int64_t{1} << steps) < n) ++steps;
  return steps;
}
}  // namespace

int peersUsedBound(int worldSize) { return 4 * ceilLog2Of(worldSize); }

std::vector<int> peersUsed(int rank, int worldSize) {
  std::vector<int> out;
  const int n = worldSize;
  // Dissemination neighbours; k = 0 is the ring.
  for (int k = 0; k < ceilLog2Of(n); ++k) {
    const int hop = static_cast<int>((int64_t{1} << k) % n);
    out.push_back((rank + hop) % n);
    out.push_back((rank - hop + n) % n);
  }
  // Recursive doubling / halving-doubling over the power-of-two fold. The shape is
  // collectives/power_of_two_fold.h's (this room may not include collectives/); the
  // peer-set test runs every algorithm and checks it uses no peer outside this set.
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  auto real = [rem](int v) { return v < rem ? v * 2 + 1 : v + rem; };
  int vrank = rank - rem;  // the rank's place among the p participants, -1 if folded away
  if (rank < 2 * rem) {
    out.push_back(rank ^ 1);
    vrank = rank % 2 == 1 ? rank / 2 : -1;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) out.push_back(real(vrank ^ mask));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  out.erase(std::remove(out.begin(), out.end(), rank), out.end());
  return out;
}

}  // namespace nezha
