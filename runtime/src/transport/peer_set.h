// Which peers a rank connects a rail to at start-up: the union of the peers the one-rail
// algorithms (collectives/) and the control mesh (failover/control_mesh.h) exchange with, so
// that connections per rank grow with log N instead of N (runtime/README.md "Connection
// model"). Every other peer (alltoall, point-to-point to any rank, the signed operations'
// header to every peer) is connected on first use (TcpChannel, transport/peer_mesh.h).
//
// The set of rank r among N ranks:
//   - dissemination neighbours (r +- 2^k) mod N, k < ceil(log2 N): the control mesh's rounds,
//     heartbeats and verdicts, the dissemination barrier, and the binomial-tree broadcast from
//     ANY root (its parent and children are vrank -+ 2^k counted from the root, i.e. r -+ 2^k
//     mod N); k = 0 is the ring neighbours r +- 1 (ring allreduce, allgather, reduce-scatter,
//     pipelined chain broadcast);
//   - recursive-doubling and halving/doubling partners: with p the largest power of two <= N
//     and rem = N - p (collectives/power_of_two_fold.h), the first 2 rem ranks pair up (r ^ 1)
//     and the p participants exchange with participant v ^ 2^k, mapped back to real ranks.
// At most 2 ceil(log2 N) + log2(p) + 1 <= 4 ceil(log2 N) peers; symmetric (a holds b iff b holds
// a), so both ends of every pair agree on which connections exist from the start.
#pragma once

#include <vector>

namespace nezha {

// The peers `rank` connects at start-up (sorted, without `rank`).
std::vector<int> peersUsed(int rank, int worldSize);

// The bound the set keeps: 4 ceil(log2 N) (0 for N = 1).
int peersUsedBound(int worldSize);

}  // namespace nezha
