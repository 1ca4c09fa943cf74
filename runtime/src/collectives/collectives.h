// Collective algorithms over ONE rail (a Channel). The scheduler hands each rail a slice of the
// operation; these functions neither know nor care about other rails.
//
// Vocabulary: a *chunk* is the 1/n part of a rail's slice that one rank owns during a ring; a
// *block* is one rank's contribution in allgather/reduce_scatter layouts (block i lives at
// base + i*stride); to *forward* is to send bytes on as soon as they were received (and
// reduced), which is how rings and chains pipeline without fixed-size segments.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "collectives/algorithm.h"
#include "nezha/nezha.hpp"
#include "transport/channel.h"

namespace nezha {

// Reusable temporary memory of one rail (only its rail thread touches it).
class Scratch {
 public:
  char* get(int slot, size_t bytes) {
    if (slots_.size() <= static_cast<size_t>(slot)) slots_.resize(slot + 1);
    if (slots_[slot].size() < bytes) slots_[slot].resize(bytes);
    return slots_[slot].data();
  }

 private:
  std::vector<std::vector<char>> slots_;
};

// In place on buf[0, count). Every rank ends with bit-identical results.
void allreduce(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op, Scratch& scratch,
               const AlgoOptions& o);
// Out of place: in[0, count) is only read (a replay after a rail failure needs it intact),
// out[0, count) gets the result; in == out is in place. The algorithm is o.choose(allreduce,
// slice bytes, ranks); ring and halving/doubling need count >= ranks and fall back to recursive
// doubling below that (on every rank alike). The ring reads the input directly; the others copy
// it first.
void allreduce(Channel& ch, const char* in, char* out, size_t count, DataType dt, ReduceOp op,
               Scratch& scratch, const AlgoOptions& o);
void allreduceRing(Channel& ch, const char* in, char* out, size_t count, DataType dt, ReduceOp op,
                   Scratch& scratch);
void allreduceRecursiveDoubling(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op,
                                Scratch& scratch);
// Rabenseifner (allreduce_halving_doubling.cc): reduce-scatter by recursive halving, allgather
// by recursive doubling; non-power-of-two rank counts fold the extra ranks in first. In place on
// buf; needs count >= ranks.
void allreduceHalvingDoubling(Channel& ch, char* buf, size_t count, DataType dt, ReduceOp op,
                              Scratch& scratch);

void broadcast(Channel& ch, char* buf, size_t bytes, int root, const AlgoOptions& o);
void broadcastBinomialTree(Channel& ch, char* buf, size_t bytes, int root);
void broadcastPipelinedChain(Channel& ch, char* buf, size_t bytes, int root);

// Blocks of `bytes` at base + i*stride; this rank's block is already in place. The first picks
// the algorithm by o.choose(allgather, bytes * ranks, ranks).
void allgather(Channel& ch, char* base, size_t stride, size_t bytes, const AlgoOptions& o);
void allgatherRing(Channel& ch, char* base, size_t stride, size_t bytes);

// Input blocks of `count` elements at in + i*inStride (not modified); the reduced block of this
// rank goes to out (which may alias this rank's input block). The first picks the algorithm by
// o.choose(reduce_scatter, count * elemSize * ranks, ranks).
void reduceScatter(Channel& ch, const char* in, size_t inStride, char* out, size_t count,
                   DataType dt, ReduceOp op, Scratch& scratch, const AlgoOptions& o);
void reduceScatterRing(Channel& ch, const char* in, size_t inStride, char* out, size_t count,
                       DataType dt, ReduceOp op, Scratch& scratch);

// Personalized exchange (alltoall.cc). What this rank sends to and receives from each peer;
// one rail carries the part of every message that its slice [unitBegin, unitBegin+unitCount)
// of the operation's `units` covers (messagePart), so the rails' slices of one operation tile
// every message exactly, whatever the split, and a replayed slice rewrites the same bytes.
struct AlltoallLayout {
  const char* send = nullptr;
  char* recv = nullptr;
  size_t elemSize = 1;
  // Elements, per peer (worldSize entries); recvCount[p] is what p sends to this rank.
  std::vector<size_t> sendCount, sendDispl, recvCount, recvDispl;
  size_t units = 0;      // the unit space the scheduler splits (> 0 when anything moves)
  size_t unitBytes = 0;  // agreed bytes per unit: the slice size the algorithm choice sees
};
// Elements [first, second) of a message of `count` elements that units [a, b) of `units`
// cover: floor(count*a/units) .. floor(count*b/units), exact in 128-bit arithmetic.
std::pair<size_t, size_t> messagePart(size_t count, size_t a, size_t b, size_t units);
// One rail's slice, peers only (this rank's own block is the caller's copy). The algorithm is
// o.choose(alltoall, unitCount * unitBytes, ranks): the same on every rank.
void alltoall(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount,
              const AlgoOptions& o);
void alltoallPairwise(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount);
void alltoallDirect(Channel& ch, const AlltoallLayout& l, size_t unitBegin, size_t unitCount);

void barrierDissemination(Channel& ch);

}  // namespace nezha
