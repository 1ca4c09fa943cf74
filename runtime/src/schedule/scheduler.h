// The multi-rail scheduler (load balancer): decides, identically on every rank, which rails
// carry which part of each operation.
//
//   cold start  bytes < cold threshold: the whole operation on the lowest-latency rail; an
//               allreduce the offload rail (SHARP) can reduce goes whole to that rail instead
//               when the algorithm table's allreduce row for its size says "transport": "sharp"
//               (the built-in rows do for every size)
//   hot start   split by the data-length table entry of (collective, world size, size bucket)
//
// Offload rails (transport "sharp", transport/offload.h) reduce in the network and carry only
// such cold allreduces: splits, cold/best rail, barriers and replays use the other rails, which
// the configuration guarantees exist (core/config.cc).
//
// Agreement: every rank records per-rail slice times locally. Every `tuneInterval` operations
// (operation numbers are the same on all ranks because collectives are called in the same
// order) the pending times are max-reduced on the control mesh and every rank applies the same
// deterministic update before running that operation, so splits never diverge.
#pragma once

#include <cstdint>
#include <vector>

#include "nezha/nezha.hpp"
#include "schedule/algo_table.h"
#include "schedule/split.h"
#include "schedule/table.h"

namespace nezha {

struct ProbeResult {
  std::vector<double> latency;    // seconds, small allreduce, agreed (max over ranks)
  std::vector<double> bandwidth;  // bytes/s, probe allreduce, agreed
};

struct Plan {
  OpKind op = OpKind::kBarrier;
  bool hot = false;  // really split: more than one slice
  TableKey key{OpKind::kBarrier, 0, 0};
  size_t units = 0;      // elements being split (per block for allgather/reduce_scatter)
  size_t unitBytes = 0;  // bytes of the operation per unit
  std::vector<Slice> slices;
  // Planned from the table entry (hot territory), even when the split left a single rail: its
  // timings are recorded so the entry keeps agreeing (a rail left out can be probed back).
  bool tabled = false;
};

class Scheduler {
 public:
  // `algo`: the algorithm table (schedule/algo_table.h): its SHARP rows and its cold threshold
  // for this world size (used unless Options::coldThreshold is set).
  Scheduler(const Options& o, const ProbeResult& probe, Table table, AlgoTable algo = AlgoTable());
  // A new algorithm table at an operation every rank reaches alike (nezha-tune); the cold
  // threshold stays as it is.
  void setAlgoTable(AlgoTable algo) { algo_ = std::move(algo); }
  const AlgoTable& algoTable() const { return algo_; }

  // `offloadable`: an allreduce whose type and operator the offload rail reduces.
  Plan plan(OpKind op, size_t units, size_t unitBytes, bool offloadable = false);
  // Local timings of a finished operation (seconds per rail, 0 for unused rails).
  void record(const Plan& plan, const std::vector<double>& railSeconds);

  // Whether operation number `opNumber` starts with an agreement round.
  bool agreementDue(uint64_t opNumber) const;
  // This rank's pending per-rail seconds, entry by entry in table order (same layout on every
  // rank). Empty when nothing is pending.
  std::vector<double> pendingStats() const;
  // Applies the max-reduced stats from pendingStats() and clears the pending timings.
  void applyAgreed(const std::vector<double>& agreed);

  // Rails that may carry slices (all, until a failover removes one). Plans only use live rails,
  // each keeping its own ratio (renormalized over the survivors). At least one must be live.
  void setAlive(const std::vector<bool>& alive);
  const std::vector<bool>& alive() const { return alive_; }
  // Re-splits failed slices [offset, offset+count) over the live rails by their ratios for
  // `plan`'s table entry; the pieces keep the original element ranges.
  std::vector<Slice> resplit(const Plan& plan, const std::vector<Slice>& failed) const;
  // Predicted seconds of `bytes` on `rail` from the probe (latency + bytes / bandwidth).
  double predictSeconds(int rail, size_t bytes) const;
  // A rail measured anew (re-admission probe, agreed on every rank): its latency and bandwidth
  // replace the init probe's, and in every table entry its ratio becomes the share that
  // bandwidth earns next to the other rails as they run now (their observed rates where known),
  // and the tuner refines it from there. A rail that came back slow thus starts small instead of
  // with the share it had when healthy, and one that was tuned down while it was gray starts
  // from what it measures now, not from the share it was left with (which could sit below
  // NEZHA_MIN_SLICE_BYTES and so never be timed again). The static policy keeps its split
  // (fixed at start by design).
  void remeasure(int rail, double latencySeconds, double bandwidthBytesPerSecond);

  // The rail's rate in the last agreed timings of an entry that gave it enough bytes to judge
  // (op bytes per second, the probe's unit), or 0 if none since start or its last remeasure.
  // Agreed, so the same on every rank. Unlike the probe values it follows a rail that slowed
  // down (or was probed unshaped) after start: re-admission compares a healed rail with these.
  double observedBandwidth(int rail) const { return observed_[static_cast<size_t>(rail)]; }

  // The share of the job's bandwidth a rail measured at `bandwidthBytesPerSecond` earns next to
  // the other rails `alive` keeps that move bytes, each counted at its observed rate where the
  // agreed timings give one and at its probe rate otherwise. Re-admission's slow floor and
  // remeasure's re-seed both judge a healed rail by this one number.
  double shareNextToOthers(int rail, double bandwidthBytesPerSecond,
                           const std::vector<bool>& alive) const;

  int coldRail() const { return coldRail_; }  // lowest-latency live rail that moves bytes
  int bestRail() const { return bestRail_; }  // highest-bandwidth live rail that moves bytes
  // The live offload rail (the lowest-index one if several), or -1.
  int offloadRail() const;
  bool isOffload(int rail) const { return offload_[static_cast<size_t>(rail)]; }
  // Whether `alive` keeps a rail that moves bytes (without one, nothing but small allreduces
  // could run: failover treats that as no rail left).
  bool anyByteRail(const std::vector<bool>& alive) const;
  size_t coldThreshold() const { return coldThreshold_; }
  void setColdThreshold(size_t bytes) {
    coldThreshold_ = bytes;
    table_.coldThreshold = bytes;
  }
  const std::vector<double>& baseRatios() const { return baseRatios_; }
  const Table& table() const { return table_; }
  Table& table() { return table_; }

 private:
  Options o_;
  size_t nrails_;
  ProbeResult probe_;
  int coldRail_, bestRail_;
  size_t coldThreshold_;
  std::vector<double> baseRatios_;
  Table table_;
  AlgoTable algo_;
  std::vector<bool> alive_;
  std::vector<bool> offload_;     // per rail: reduces in the network, carries no byte slices
  std::vector<double> observed_;  // per rail: observedBandwidth()
  // Dead and offload rails -> 0.
  std::vector<double> masked(const std::vector<double>& ratios) const;
  // Moves `rail`'s ratio in `ratios` to `share`, the others keeping their proportions.
  void setShare(std::vector<double>& ratios, int rail, double share) const;
  // After an agreement on `e` with its agreed per-rail seconds: a live rail whose share earns no
  // slice (share x bytes below NEZHA_MIN_SLICE_BYTES) is never timed, so the tuner alone could
  // never give it a share back once it is fast again. Such a rail gets the least share that
  // earns a slice in this bucket after kFirstProbeWait starved agreements; its timings decide
  // from there. Waits double per probe that did not win the rail a share (to kMaxProbeWait),
  // and are at least probeCostWait after a probe that slowed the job. Winning means timings
  // that hold the rail at least at the probe's share; a probe that did not win leaves the split
  // at once (its tail would cost the job, and a token bucket's burst flatters a probe); one that
  // won ramps up, at most doubling per agreement the share it ran on (`ranOn`: the ratios of the
  // interval just agreed), each step judged as the probe was.
  void probeStarvedRails(const TableKey& key, TableEntry& e, const std::vector<double>& secs,
                         const std::vector<double>& ranOn);
  // Agreements to wait so that a probe interval that ran `rail` this much past the other rails
  // costs at most kStarvedProbeBudget of the job's time (0 if it cost nothing).
  uint32_t probeCostWait(size_t rail, const std::vector<double>& secs) const;
  // A rail whose agreed rate in `e` fell below 1/kCollapseFactor of its rate there at the
  // previous agreement (both over enough bytes to be a rate) while its part of an operation
  // ran less than a watchdog window past the others (a longer lag is the watchdog's), or -1.
  int collapsedRail(const TableEntry& e, const std::vector<double>& secs) const;
};

}  // namespace nezha
