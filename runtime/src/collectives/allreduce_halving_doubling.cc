// Allreduce by recursive halving and doubling (Rabenseifner; Thakur, Rabenseifner and Gropp,
// "Optimization of Collective Communication Operations in MPICH", 2005).
//
// p = the largest power of two <= n. The slice is cut into p blocks.
//   fold       n not a power of two: the first 2*(n-p) ranks pair up; each even one hands its
//              whole slice to its odd neighbour (which reduces it in) and sits out.
//   halving    log2(p) steps among the p participants: with partner vrank ^ mask (mask from
//              p/2 down to 1) exchange halves of the current window of blocks; each keeps the
//              half its own bit selects and reduces the partner's copy of it in. Afterwards
//              participant v holds block v fully reduced.
//   doubling   log2(p) steps in reverse: partners swap their reduced windows, doubling them,
//              until every participant holds every block.
//   unfold     each odd rank of a folded pair sends the result to its even neighbour.
// Each participant sends about 2(p-1)/p of the slice (like the ring) in 2*log2(p) steps
// instead of 2(n-1): it wins over the ring where start-up costs dominate, and over recursive
// doubling (which sends the whole slice log2(p) times) once bandwidth does.
//
// Every block is reduced in exactly one place per step and then copied, so all ranks end
// bit-identical; operands are combined lower rank first (as recursive doubling does), so
// min/max with NaN give the same answer whichever rank reduces.
#include <cstring>

#include "base/error.h"
#include "base/reduce.h"
#include "collectives/collectives.h"
#include "collectives/power_of_two_fold.h"

namespace nezha {

void allreduceHalvingDoubling(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op,
                              Scratch& scratch) {
  const int n = ch.size(), r = ch.rank();
  const size_t es = dataTypeSize(dt), bytes = count * es;
  NEZHA_ENFORCE(count >= static_cast<size_t>(n), "halving/doubling needs count >= ranks");
  const PowerOfTwoFold fold(n);
  const int p = fold.p;
  // Received data lands at its own offset, so concurrent halves never share scratch bytes.
  char* tmp = scratch.get(0, bytes);
  // Block b of p: elements [begin(b), begin(b+1)), computed without overflowing count * b.
  const size_t q = count / static_cast<size_t>(p), rest = count % static_cast<size_t>(p);
  auto begin = [&](int b) {
    return q * static_cast<size_t>(b) + rest * static_cast<size_t>(b) / static_cast<size_t>(p);
  };

  // Receive [from, to) blocks from `peer` into tmp and combine with buf as bytes land; `peer`
  // lower-ranked -> its operand first.
  auto reduceRecv = [&](int peer, size_t from, size_t to) {
    char* mine = buf + from * es;
    char* land = tmp + from * es;
    const bool theirsFirst = peer < r;
    return IoOp::recv(peer, land, (to - from) * es, es, [=](size_t off, size_t len) {
      if (theirsFirst) {
        reduceInto(land + off, mine + off, len / es, dt, op);
        std::memcpy(mine + off, land + off, len);
      } else {
        reduceInto(mine + off, land + off, len / es, dt, op);
      }
    });
  };

  if (fold.folded(r)) {
    std::vector<IoOp> ops{r % 2 == 0 ? IoOp::send(r + 1, buf, bytes, es)
                                     : reduceRecv(r - 1, 0, count)};
    ch.exchange(ops);
  }
  const int vrank = fold.participant(r);  // -1 if folded away

  if (vrank >= 0) {
    int lo = 0, hi = p;  // window of blocks this participant still reduces
    for (int mask = p / 2; mask > 0; mask >>= 1) {
      const int partner = fold.real(vrank ^ mask), mid = (lo + hi) / 2;
      const bool upper = (vrank & mask) != 0;
      const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
      const int sendLo = upper ? lo : mid, sendHi = upper ? mid : hi;
      std::vector<IoOp> ops;
      ops.push_back(
          IoOp::send(partner, buf + begin(sendLo) * es, (begin(sendHi) - begin(sendLo)) * es, es));
      ops.push_back(reduceRecv(partner, begin(keepLo), begin(keepHi)));
      ch.exchange(ops);
      lo = keepLo;
      hi = keepHi;
    }
    // lo == vrank, hi == vrank + 1: this participant's block is final.
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = fold.real(vrank ^ mask);
      const bool upper = (vrank & mask) != 0;
      const int otherLo = upper ? lo - mask : hi, otherHi = upper ? lo : hi + mask;
      std::vector<IoOp> ops;
      ops.push_back(IoOp::send(partner, buf + begin(lo) * es, (begin(hi) - begin(lo)) * es, es));
      ops.push_back(IoOp::recv(partner, buf + begin(otherLo) * es,
                               (begin(otherHi) - begin(otherLo)) * es, es));
      ch.exchange(ops);
      lo = upper ? otherLo : lo;
      hi = upper ? hi : otherHi;
    }
  }

  fold.unfold(ch, r, buf, bytes, es);
}

}  // namespace nezha
