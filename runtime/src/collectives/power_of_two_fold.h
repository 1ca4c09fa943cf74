// The standard way recursive doubling and halving/doubling serve a rank count n that is not a
// power of two (Thakur, Rabenseifner and Gropp 2005): p = the largest power of two <= n; the
// first 2*(n-p) ranks pair up, each even one folds its data into its odd neighbour and sits the
// algorithm out, and at the end each odd one hands the result back (unfold). How a folded slice
// is reduced differs per algorithm, so only the shape and the unfold live here.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/channel.h"

namespace nezha {

struct PowerOfTwoFold {
  explicit PowerOfTwoFold(int n) {
    while (p * 2 <= n) p *= 2;
    rem = n - p;
  }
  int p = 1;    // participants
  int rem = 0;  // folded pairs: ranks [0, 2*rem)

  bool folded(int rank) const { return rank < 2 * rem; }
  // The rank's place among the p participants, or -1 if it handed its data over.
  int participant(int rank) const {
    if (!folded(rank)) return rank - rem;
    return rank % 2 == 1 ? rank / 2 : -1;
  }
  // The real rank of participant v.
  int real(int v) const { return v < rem ? v * 2 + 1 : v + rem; }

  // Unfold: each folded pair's odd rank sends the finished `bytes` at buf to its even neighbour.
  void unfold(Channel& ch, int rank, char* buf, size_t bytes, size_t elementSize) const {
    if (!folded(rank)) return;
    std::vector<IoOp> ops;
    if (rank % 2 == 0) {
      ops.push_back(IoOp::recv(rank + 1, buf, bytes, elementSize));
    } else {
      ops.push_back(IoOp::send(rank - 1, buf, bytes, elementSize));
    }
    ch.exchange(ops);
  }
};

}  // namespace nezha
