// Pre-flight: before the first operation, every rank checks every rail to its peers with a real
// transfer, so a rail that is up but cannot carry data (a black hole, an MTU mismatch that lets
// handshakes through and drops full-size frames, a far-end switch port) is found before
// training, not by the first collective's deadline.
//
// What is checked, per rail:
//   1. connect   every rail connects to its start-up set concurrently, within
//                NEZHA_PREFLIGHT_TIMEOUT_MS (transport/peer_set.h: the peers the algorithms and
//                the control mesh use; the rest are connected on first use);
//   2. transfer  NEZHA_PREFLIGHT_BYTES each way, with a pattern that names sender, receiver and
//                rail, to the peers preflightPeers() picks, every byte checked;
//   3. agree     the ranks exchange, in one control-mesh round, which rails failed and where
//                (a failing (rank, peer) per rank and rail up to 64 ranks; beyond, one per rail,
//                so the round stays the size of a per-operation agreement), and every rank
//                takes the same decision under NEZHA_PREFLIGHT:
//                  fail     the job stops with one error listing the failing pairs;
//                  degrade  failing rails start out of the split and join through re-admission
//                           (a real end-to-end probe) once healthy;
//                  wait     like degrade, but the communicator is not handed to the job until
//                           every rail is back (bounded by NEZHA_PREFLIGHT_WAIT_MS);
//                  off      connect as before: a rail that cannot connect ends the start.
//
// Which peers get a transfer: exactly the pairs connected at start-up, at every N — the
// peers the algorithms and the control mesh exchange with (transport/peer_set.h: ring and
// dissemination neighbours, recursive-doubling partners), at most 4 ceil(log2 N) per rank
// instead of N - 1. A broken pair outside that set (used only by alltoall or point-to-point
// traffic) costs nothing until the data path meets it, when its first-use connect or transfer
// fails the rail. The set is symmetric (a checks b iff b checks a), so both ends post matching
// transfers.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace nezha {

// The peers `rank` checks with a transfer (sorted, without `rank`).
std::vector<int> preflightPeers(int rank, int worldSize);

// One pair that failed: `rank` could not use `rail` with `peer` (peer -1: not known which).
struct PreflightFailure {
  int rank = 0;
  int rail = 0;
  int peer = -1;
  std::string reason;
};

// Sends `bytes` to every peer in `peers` and receives as many from each, in one exchange on a
// connected channel, and checks every received byte. Returns the peers whose data did not
// arrive whole or arrived wrong; the channel is broken afterwards if any did (RailError inside).
std::vector<PreflightFailure> checkTransfers(Channel& channel, const std::vector<int>& peers,
                                             size_t bytes);

// The byte a sender puts at `offset` of its pre-flight transfer to `to` on rail `rail`.
unsigned char preflightByte(int from, int to, int rail, size_t offset);

// "rail r1: rank 2 -> rank 0 (reason); ..." with at most `limit` pairs, then "and N more".
std::string describeFailures(const std::vector<PreflightFailure>& failures,
                             const std::vector<std::string>& railNames, size_t limit = 8);

}  // namespace nezha
