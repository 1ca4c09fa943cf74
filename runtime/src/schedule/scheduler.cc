#include "schedule/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "schedule/tuner.h"

namespace nezha {

namespace {
// Fewer bytes than this on a rail in one entry's agreed timings say more about latency than rate.
constexpr double kMinObservedBytes = 256 << 10;
// Cold-path predictions this close to the least are ties, won by bandwidth (Scheduler::plan).
constexpr double kColdTieMargin = 0.25;
// A rail whose rate in an entry fell below 1/kCollapseFactor of what it showed there at the
// previous agreement has collapsed (a gray rail: the design's "suddenly 40x slower"); no noise
// on these rails moves a whole interval's rate that far.
constexpr double kCollapseFactor = 4;
}  // namespace

Scheduler::Scheduler(const Options& o, const ProbeResult& probe, Table table, AlgoTable algo)
    : o_(o),
      nrails_(o.rails.size()),
      probe_(probe),
      coldRail_(lowestLatencyRail(probe.latency)),
      bestRail_(highestBandwidthRail(probe.bandwidth)),
      baseRatios_(ratiosFromBandwidth(probe.bandwidth)),
      table_(std::move(table)),
      algo_(std::move(algo)),
      alive_(o.rails.size(), true),
      observed_(o.rails.size(), 0.0) {
  NEZHA_ENFORCE(probe.latency.size() == nrails_ && probe.bandwidth.size() == nrails_,
                "probe covers ", probe.latency.size(), " of ", nrails_, " rails");
  for (const RailSpec& r : o.rails) offload_.push_back(r.transport == "sharp");
  NEZHA_ENFORCE(anyByteRail(alive_), "no rail that moves bytes");
  setAlive(alive_);             // cold and best rail among the byte-moving rails
  std::vector<double> lat, bw;  // the threshold weighs splitting, which offload rails never do
  for (size_t i = 0; i < nrails_; ++i) {
    if (offload_[i]) continue;
    lat.push_back(probe.latency[i]);
    bw.push_back(probe.bandwidth[i]);
  }
  // An explicit threshold wins, then the algorithm table's for this world size, then a loaded
  // data-length table's, then the probe's estimate.
  if (o.coldThreshold) {
    coldThreshold_ = *o.coldThreshold;
  } else if (std::optional<size_t> forN = algo_.coldThreshold(o.worldSize)) {
    coldThreshold_ = *forN;
  } else if (table_.coldThreshold) {
    coldThreshold_ = *table_.coldThreshold;
  } else {
    coldThreshold_ = autoColdThreshold(lat, bw);
  }
  table_.coldThreshold = coldThreshold_;
}

int Scheduler::offloadRail() const {
  for (size_t i = 0; i < nrails_; ++i) {
    if (offload_[i] && alive_[i]) return static_cast<int>(i);
  }
  return -1;
}

bool Scheduler::anyByteRail(const std::vector<bool>& alive) const {
  for (size_t i = 0; i < nrails_; ++i) {
    if (alive[i] && !offload_[i]) return true;
  }
  return false;
}

Plan Scheduler::plan(OpKind op, size_t units, size_t unitBytes, bool offloadable) {
  Plan p;
  p.op = op;
  p.units = units;
  p.unitBytes = unitBytes;
  const size_t bytes = units * unitBytes;
  p.key = TableKey{op, o_.worldSize, sizeBucket(bytes)};
  auto whole = [&](int rail) {
    if (units > 0) p.slices.push_back(Slice{rail, 0, units});
    return p;
  };
  if (op == OpKind::kBarrier) return whole(coldRail_);
  // Cold start (paper Eq. 4): the one rail with the least latency + bytes/bandwidth, where
  // predictions within kColdTieMargin of the least count as equal and the fastest of those by
  // bandwidth wins. The probe's latencies of equal rails differ by tens of microseconds of host
  // noise (bench: 82 us against 53 us, which sent 1 KiB allreduces to an 800/300 pair's slow
  // rail); its bandwidths, timed over probeBytes, do not. A real latency gap (RDMA next to TCP)
  // is a factor, far outside the margin.
  auto coldFor = [&] {
    double least = 1e300;
    std::vector<double> t(nrails_, 1e300);
    for (size_t i = 0; i < nrails_; ++i) {
      if (!alive_[i] || offload_[i]) continue;
      t[i] = probe_.latency[i] + static_cast<double>(bytes) / probe_.bandwidth[i];
      least = std::min(least, t[i]);
    }
    int best = -1;
    for (size_t i = 0; i < nrails_; ++i) {
      if (!alive_[i] || offload_[i] || t[i] > least * (1 + kColdTieMargin)) continue;
      if (best < 0 || probe_.bandwidth[i] > probe_.bandwidth[static_cast<size_t>(best)]) {
        best = static_cast<int>(i);
      }
    }
    return std::max(best, 0);
  };
  const size_t minUnits =
      unitBytes == 0 ? 1 : (o_.minSliceBytes + unitBytes - 1) / std::max<size_t>(unitBytes, 1);
  switch (o_.policy) {
    case Policy::kSingle:
      return whole(bestRail_);
    case Policy::kStatic:
      p.slices = splitCount(units, toWeights(masked(baseRatios_)), minUnits);
      p.hot = p.slices.size() > 1;
      return p;
    case Policy::kAdaptive: {
      // Cold path, SHARP first (Nezha v2 §3.3): a small allreduce the switches can reduce goes
      // there whole; everything else cold takes the quickest byte-moving rail.
      const int off = offloadRail();
      if (bytes < coldThreshold_ && offloadable && op == OpKind::kAllreduce && off >= 0 &&
          algo_.offloadAllreduce(bytes, o_.worldSize)) {
        return whole(off);
      }
      if (bytes < coldThreshold_ || nrails_ == 1) return whole(coldFor());
      size_t byteRails = 0;
      for (size_t i = 0; i < nrails_; ++i) byteRails += alive_[i] && !offload_[i];
      if (byteRails == 1) return whole(coldFor());
      // Too small to give two rails a minimum slice each: it can only run whole, so it runs as a
      // cold operation. A table entry would learn nothing and cost a timing agreement (two
      // rounds) every tuneInterval operations: ~5 % of a 16 KiB allreduce at 4 ranks.
      if (units < 2 * minUnits) return whole(coldFor());
      // Entries are created by record(), so sizes that never reach this point leave no trace.
      const TableEntry* e = table_.find(p.key);
      p.slices = splitCount(units, toWeights(masked(e ? e->ratios : baseRatios_)), minUnits);
      p.hot = p.slices.size() > 1;
      p.tabled = true;
      return p;
    }
  }
  NEZHA_ENFORCE(false, "unknown policy");
}

std::vector<double> Scheduler::masked(const std::vector<double>& ratios) const {
  std::vector<double> m = ratios;
  for (size_t i = 0; i < nrails_; ++i) {
    if (!alive_[i] || offload_[i]) m[i] = 0;
  }
  // Ratios are positive by construction; guard against a tuned-to-zero survivor anyway.
  if (std::all_of(m.begin(), m.end(), [](double x) { return x <= 0; })) {
    for (size_t i = 0; i < nrails_; ++i) m[i] = alive_[i] && !offload_[i] ? 1.0 : 0.0;
  }
  return m;
}

void Scheduler::setAlive(const std::vector<bool>& alive) {
  NEZHA_ENFORCE(alive.size() == nrails_, "alive mask has ", alive.size(), " rails");
  NEZHA_ENFORCE(std::count(alive.begin(), alive.end(), true) > 0, "no live rail");
  alive_ = alive;
  std::vector<double> lat = probe_.latency, bw = probe_.bandwidth;
  for (size_t i = 0; i < nrails_; ++i) {
    if (!alive_[i] || offload_[i]) {
      lat[i] = 1e300;
      bw[i] = 0;
    }
  }
  coldRail_ = lowestLatencyRail(lat);
  bestRail_ = highestBandwidthRail(bw);
}

std::vector<Slice> Scheduler::resplit(const Plan& plan, const std::vector<Slice>& failed) const {
  const TableEntry* e = plan.hot ? table_.find(plan.key) : nullptr;
  std::vector<uint32_t> w = toWeights(masked(e ? e->ratios : baseRatios_));
  const size_t minUnits =
      plan.unitBytes == 0 ? 1 : (o_.minSliceBytes + plan.unitBytes - 1) / plan.unitBytes;
  std::vector<Slice> out;
  for (const Slice& f : failed) {
    for (Slice s : splitCount(f.count, w, minUnits)) {
      s.offset += f.offset;
      out.push_back(s);
    }
  }
  return out;
}

void Scheduler::remeasure(int rail, double latencySeconds, double bandwidthBytesPerSecond) {
  NEZHA_ENFORCE(rail >= 0 && static_cast<size_t>(rail) < nrails_, "no rail ", rail);
  probe_.latency[rail] = latencySeconds;
  probe_.bandwidth[rail] = std::max(bandwidthBytesPerSecond, 1.0);
  observed_[static_cast<size_t>(rail)] = 0;  // from the new probe until timings say otherwise
  setAlive(alive_);                          // cold and best rail from the new numbers
  // The static policy's split is fixed at start by design (MRIB style); only adaptive re-seeds.
  // An offload rail has no share in any split.
  if (o_.policy != Policy::kAdaptive || offload_[rail]) return;
  baseRatios_ = ratiosFromBandwidth(probe_.bandwidth);
  const double share = shareNextToOthers(rail, probe_.bandwidth[rail], alive_);
  for (auto& [key, e] : table_.entries()) {
    setShare(e.ratios, rail, share);
    e.starvedUpdates[static_cast<size_t>(rail)] = 0;
    e.probeWait[static_cast<size_t>(rail)] = kFirstProbeWait;
    e.probed[static_cast<size_t>(rail)] = false;
  }
}

double Scheduler::shareNextToOthers(int rail, double bandwidthBytesPerSecond,
                                    const std::vector<bool>& alive) const {
  NEZHA_ENFORCE(alive.size() == nrails_, "alive has ", alive.size(), " rails, want ", nrails_);
  // The other rails as they run now: probe values go stale (a rail probed before it was shaped
  // once made every healed rail look 1.5 % of the job), the agreed timings do not. Offload rails
  // carry no byte slices, so they take no share.
  double others = 0;
  for (size_t q = 0; q < nrails_; ++q) {
    if (static_cast<int>(q) == rail || !alive[q] || offload_[q]) continue;
    others += observed_[q] > 0 ? observed_[q] : probe_.bandwidth[q];
  }
  const double own = std::max(bandwidthBytesPerSecond, 1.0);
  return own / (own + others);
}

void Scheduler::setShare(std::vector<double>& ratios, int rail, double share) const {
  const size_t r = static_cast<size_t>(rail);
  const double delta = share - ratios[r], rest = 1.0 - ratios[r];
  if (delta == 0) return;
  // The other rails give (or take) the difference in proportion to what they have.
  for (size_t q = 0; q < nrails_; ++q) {
    if (q == r) continue;
    ratios[q] -= rest > 0 ? delta * ratios[q] / rest : delta / static_cast<double>(nrails_ - 1);
    ratios[q] = std::max(ratios[q], 0.0);
  }
  ratios[r] = share;
  double sum = 0;
  for (double v : ratios) sum += v;
  for (double& v : ratios) v /= sum;
}

void Scheduler::probeStarvedRails(const TableKey& key, TableEntry& e,
                                  const std::vector<double>& secs,
                                  const std::vector<double>& ranOn) {
  if (o_.minSliceBytes == 0) return;  // every positive share earns a slice
  // The smallest operation of the bucket gets a slice a quarter above the minimum from this
  // share, so weight rounding cannot drop it again; any larger one gets more.
  const double probeShare =
      1.25 * static_cast<double>(o_.minSliceBytes) / std::ldexp(1.0, std::max(key.bucket, 0));
  for (size_t i = 0; i < nrails_; ++i) {
    if (!alive_[i] || offload_[i]) continue;
    const bool wasProbed = e.probed[i];
    e.probed[i] = false;
    if (e.pendingBytes[i] > 0) {
      e.starvedUpdates[i] = 0;
      if (!wasProbed) {
        // Bytes it earned on its own, and its timings hold it at least at a probe's share: it is
        // back; a later starvation starts the waits over. Below that share it is the tail of a
        // probe its first bytes flattered, or a rail sinking: the waits go on.
        if (e.ratios[i] >= probeShare) e.probeWait[i] = kFirstProbeWait;
        continue;
      }
      // The probe's own interval: if it slowed the job, the next probe waits long enough to
      // stay within the budget.
      e.probeWait[i] = std::max(e.probeWait[i], probeCostWait(i, secs));
      // Its timings did not raise it above the probe's share: it is still too slow to earn a
      // slice of its own. It leaves the split now, not over the further agreements the tuner's
      // gain would take to walk it down, each of which the job would wait on it for (behind a
      // token bucket the probe's first bytes leave at line rate, so the probe flatters it), and
      // whose bytes would pass for a share won back and start the waits over.
      if (e.ratios[i] < probeShare) {
        setShare(e.ratios, static_cast<int>(i), 0.0);
        continue;
      }
      // Won: it ramps up as TCP's slow start does, at most doubling the share it just ran on,
      // and each step is judged as the probe was. One flattered interval would otherwise hand a
      // still-gray rail the share of a healthy one for the next interval (a probe slice that fits
      // a token bucket's burst times at line rate).
      if (e.ratios[i] > 2 * ranOn[i]) {
        setShare(e.ratios, static_cast<int>(i), 2 * ranOn[i]);
        e.probed[i] = true;
      }
      continue;
    }
    if (++e.starvedUpdates[i] < e.probeWait[i]) continue;
    e.starvedUpdates[i] = 0;
    e.probeWait[i] = std::min(2 * e.probeWait[i], std::max(kMaxProbeWait, e.probeWait[i]));
    // A bucket too small for two slices of the minimum is not split at all: nothing to probe.
    if (probeShare > 0.5 || e.ratios[i] >= probeShare) continue;
    setShare(e.ratios, static_cast<int>(i), probeShare);
    e.probed[i] = true;
    if (o_.verbose && o_.rank == 0) {
      std::fprintf(stderr, "nezha: tune %s bucket 2^%d: probe slice for starved rail %s\n",
                   toString(key.op), key.bucket, o_.rails[i].name.c_str());
    }
  }
}

int Scheduler::collapsedRail(const TableEntry& e, const std::vector<double>& secs) const {
  const double ops = static_cast<double>(std::max<uint64_t>(e.pendingOps, 1));
  for (size_t i = 0; i < nrails_; ++i) {
    if (secs[i] <= 0 || e.pendingBytes[i] < kMinObservedBytes || e.lastRate[i] <= 0) continue;
    if (e.pendingBytes[i] / secs[i] * kCollapseFactor >= e.lastRate[i]) continue;
    // A collapse whose part of an operation ran a watchdog window or more past the other rails
    // is the watchdog's: it fails the rail over as slow at the next such operation, and
    // re-admission brings it back, probed, as soon as it heals. Stepping it out of the split
    // first would leave a rail that is merely out of the split, whose starvation probes back
    // off while it stays gray (up to hundreds of agreements after a costly probe), so it would
    // come back late. The full step is for collapses the watchdog never sees: a part that
    // lags by less than its window each time (the NCCL plugin's 512 KiB messages on a 40x
    // slower rail, ~165 ms each).
    double others = 0;
    for (size_t q = 0; q < nrails_; ++q) {
      if (q != i) others = std::max(others, secs[q]);
    }
    const double lagPerOp = (secs[i] - others) / ops;
    if (o_.watchdog.count() > 0 && lagPerOp * 1000 >= static_cast<double>(o_.watchdog.count())) {
      continue;
    }
    return static_cast<int>(i);
  }
  return -1;
}

uint32_t Scheduler::probeCostWait(size_t rail, const std::vector<double>& secs) const {
  // The probe interval's agreed seconds: how long the probed rail ran past the slowest other
  // rail is what the probe cost the job. Waiting `w` intervals of about `others` seconds each
  // keeps that under kStarvedProbeBudget of the job's time.
  double others = 0;
  for (size_t q = 0; q < nrails_; ++q) {
    if (q != rail) others = std::max(others, secs[q]);
  }
  const double overrun = secs[rail] - others;
  if (overrun <= 0 || others <= 0) return 0;
  const double wait = std::ceil(overrun / (kStarvedProbeBudget * others));
  return static_cast<uint32_t>(std::min(wait, static_cast<double>(kMaxProbeCostWait)));
}

double Scheduler::predictSeconds(int rail, size_t bytes) const {
  return probe_.latency[rail] + static_cast<double>(bytes) / probe_.bandwidth[rail];
}

void Scheduler::record(const Plan& plan, const std::vector<double>& railSeconds) {
  if (o_.policy != Policy::kAdaptive || !plan.tabled) return;
  TableEntry& e = table_.entry(plan.key, baseRatios_);
  ++e.ops;
  ++e.pendingOps;
  for (const Slice& s : plan.slices) {
    e.pendingSeconds[s.rail] += railSeconds[s.rail];
    e.pendingBytes[s.rail] += static_cast<double>(s.count * plan.unitBytes);
  }
}

bool Scheduler::agreementDue(uint64_t opNumber) const {
  return o_.policy == Policy::kAdaptive && opNumber > 0 &&
         opNumber % static_cast<uint64_t>(o_.tuneInterval) == 0;
}

std::vector<double> Scheduler::pendingStats() const {
  std::vector<double> stats;
  for (const auto& [key, e] : table_.entries()) {
    if (e.pendingOps == 0) continue;
    stats.insert(stats.end(), e.pendingSeconds.begin(), e.pendingSeconds.end());
  }
  return stats;
}

void Scheduler::applyAgreed(const std::vector<double>& agreed) {
  size_t pos = 0;
  for (auto& [key, e] : table_.entries()) {
    if (e.pendingOps == 0) continue;
    NEZHA_ENFORCE(pos + nrails_ <= agreed.size(), "agreed stats too short");
    std::vector<double> secs(agreed.begin() + static_cast<long>(pos),
                             agreed.begin() + static_cast<long>(pos + nrails_));
    pos += nrails_;
    const std::vector<double> ranOn = e.ratios;
    const int collapsed = collapsedRail(e, secs);
    // The gain damps noise; a collapse is not noise. At the gain a collapsed rail kept most of
    // its share for several more agreements and every operation in them waited on it (the NCCL
    // plugin's gray fault: ~1.4 s over three agreements). Its timings already give its rate, so
    // the split goes where all rails finish together in one step.
    e.ratios = tuneRatios(e.ratios, e.pendingBytes, secs, collapsed >= 0 ? 1.0 : o_.tuneGain);
    probeStarvedRails(key, e, secs, ranOn);
    for (size_t i = 0; i < nrails_; ++i) {
      if (secs[i] > 0 && e.pendingBytes[i] >= kMinObservedBytes) {
        observed_[i] = e.pendingBytes[i] / secs[i];
        e.lastRate[i] = observed_[i];
      }
    }
    if (collapsed >= 0 && o_.verbose && o_.rank == 0) {
      std::fprintf(stderr, "nezha: tune %s bucket 2^%d: rail %s collapsed, full step\n",
                   toString(key.op), key.bucket, o_.rails[collapsed].name.c_str());
    }
    ++e.updates;
    if (o_.verbose && o_.rank == 0) {
      std::fprintf(stderr, "nezha: tune %s bucket 2^%d update %llu:", toString(key.op), key.bucket,
                   static_cast<unsigned long long>(e.updates));
      for (size_t i = 0; i < nrails_; ++i) {
        std::fprintf(stderr, " %s=%.3f", o_.rails[i].name.c_str(), e.ratios[i]);
      }
      std::fprintf(stderr, "\n");
    }
    e.pendingOps = 0;
    std::fill(e.pendingSeconds.begin(), e.pendingSeconds.end(), 0.0);
    std::fill(e.pendingBytes.begin(), e.pendingBytes.end(), 0.0);
  }
  NEZHA_ENFORCE(pos == agreed.size(), "agreed stats length ", agreed.size(), " != ", pos);
}

}  // namespace nezha
