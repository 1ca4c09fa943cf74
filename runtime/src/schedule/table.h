// The data-length table: per (collective, world size, size bucket) the share of each rail in a
// hot (split) operation, plus the cold-start threshold. Kept identical on every rank (it only
// changes at agreed operation numbers), saved/loaded as JSON ("nezha-table/v1").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "nezha/nezha.hpp"

namespace nezha {

// A cold threshold no operation reaches: the largest size anywhere in Nezha (counts and byte
// parameters are capped at 2^50).
constexpr size_t kNeverSplitBytes = size_t(1) << 50;

// Bucket b holds sizes in [2^b, 2^(b+1)); 0 bytes is bucket 0.
int sizeBucket(size_t bytes);

struct TableKey {
  OpKind op;
  int worldSize;
  int bucket;
  bool operator<(const TableKey& o) const {
    if (op != o.op) return op < o.op;
    if (worldSize != o.worldSize) return worldSize < o.worldSize;
    return bucket < o.bucket;
  }
};

// A live rail that carried no byte of an entry for this many agreements in a row gets a probe
// slice there; each probe that does not win the rail a share of its own doubles the wait, up to
// kMaxProbeWait (at the default NEZHA_TUNE_INTERVAL of 5: first after 20 operations, then at
// most one probe interval in 320). A probe that slowed the job waits long enough to cost at
// most kStarvedProbeBudget of its time (a rail 1000x slower than the rest: ~200 agreements),
// never more than kMaxProbeCostWait.
constexpr uint32_t kFirstProbeWait = 4;
constexpr uint32_t kMaxProbeWait = 64;
constexpr uint32_t kMaxProbeCostWait = 1024;
constexpr double kStarvedProbeBudget = 0.05;

struct TableEntry {
  std::vector<double> ratios;  // per rail (Options::rails order), sum 1
  uint64_t ops = 0;            // hot operations run with this entry
  uint64_t updates = 0;        // agreed ratio updates applied
  // Timing since the last agreement, per rail; local to this rank until agreed.
  std::vector<double> pendingSeconds, pendingBytes;
  uint64_t pendingOps = 0;
  // Per rail, for the scheduler's starvation probe (Scheduler::probeStarvedRails); derived from
  // agreed data only, so the same on every rank, and never saved.
  std::vector<uint32_t> starvedUpdates;  // agreements in a row without a byte on the rail
  std::vector<uint32_t> probeWait;       // starved agreements before the next probe slice
  std::vector<bool> probed;  // the last agreement raised the rail to a probe share or a ramp step
  // Per rail, the rate (bytes/s) its agreed timings last showed in this entry; 0 = none yet.
  // Agreed data only, never saved (Scheduler::applyAgreed: a collapse skips the tuner's gain).
  std::vector<double> lastRate;
};

class Table {
 public:
  explicit Table(std::vector<std::string> rails) : rails_(std::move(rails)) {}
  const std::vector<std::string>& rails() const { return rails_; }

  // The entry for key, created with `initial` ratios if absent.
  TableEntry& entry(const TableKey& key, const std::vector<double>& initial);
  const TableEntry* find(const TableKey& key) const;
  std::map<TableKey, TableEntry>& entries() { return entries_; }
  const std::map<TableKey, TableEntry>& entries() const { return entries_; }

  std::optional<size_t> coldThreshold;  // saved with the table when known

  Json toJson() const;
  // Parses and validates against this job's rails; throws ConfigError naming the field.
  static Table fromJson(const std::string& text, const std::vector<std::string>& rails,
                        const std::string& what);

 private:
  static void readEntry(Table& t, const Json& entry, const std::string& path);
  std::vector<std::string> rails_;
  std::map<TableKey, TableEntry> entries_;
};

}  // namespace nezha
