// Dissemination barrier: in round k every rank signals rank+2^k and waits for rank-2^k; after
// ceil(log2 n) rounds every rank has (transitively) heard from every other.
#include "collectives/collectives.h"

namespace nezha {

void barrierDissemination(Channel& ch) {
  const int n = ch.size(), r = ch.rank();
  char out = 1, in = 0;
  for (int k = 1; k < n; k <<= 1) {
    std::vector<IoOp> ops{IoOp::send((r + k) % n, &out, 1), IoOp::recv((r - k + n) % n, &in, 1)};
    ch.exchange(ops);
  }
}

}  // namespace nezha
