// What the failover engine needs from the ranks' control plane: the per-operation round (an
// element-wise max over every rank), rail-down notices to peers, and the liveness it has
// learnt. The control mesh (control_mesh.h) provides it over every rail's control connections
// at once, so a cut during a round cannot leave ranks in different rounds; the engine's unit
// tests provide it in memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/socket.h"

namespace nezha {

class Agreement {
 public:
  virtual ~Agreement() = default;

  // Element-wise max of `values` over all ranks; every rank calls it in the same order with the
  // same length. Throws RailError(-1) when a peer cannot be reached (no rail joins us any
  // more), ConfigError when the lengths differ.
  virtual void maxReduce(std::vector<double>& values, std::chrono::milliseconds timeout) = 0;
  // Best effort, from any thread: tells every peer that this rank lost `rail` (its connections
  // of that rail's `generation`).
  virtual void notifyRailDown(int rail, uint64_t generation) = 0;
  // This rank started operation `op`.
  virtual void setCurrentOp(uint64_t op) = 0;
  // True when some peer is alive but has not started operation `op` yet (a slice waiting for
  // it is not waiting on a dead rail).
  virtual bool peersBehind(uint64_t op) = 0;
  // Peers heard on no rail for peerSilence() (0 = not watched): unreachable.
  virtual std::chrono::milliseconds peerSilence() const = 0;
  virtual std::vector<int> silentPeers() const = 0;
  // A rebuilt rail's control connections (indexed by peer), replacing the old ones.
  virtual void attach(int rail, std::vector<Fd> conns) = 0;
  // This rank is gone for good: peers waiting in a round with it fail now, not later.
  virtual void closeAll() = 0;
};

}  // namespace nezha
