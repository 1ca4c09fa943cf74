// What the libsharp_coll test double observed, for the tests that drive the runtime's SHARP rail
// against it (TEST ONLY). Exported by the double as nezha_sharp_double_stats (C linkage) and
// process-wide: one double per test process, reset with nezha_sharp_double_reset.
#pragma once

#include <cstdint>

namespace nezha::sharpdouble {

struct Stats {
  // Requests that completed (reply from the aggregator in, result delivered or not).
  uint64_t completions;
  // Contract breaches of the caller, each of which would corrupt memory or crash the real
  // library: sharp_coll_req_free of a request that had not completed; sharp_coll_dereg_mr of
  // a region an unfinished request still targets; a completion whose result region had been
  // deregistered by then (the double drops the result instead of writing freed memory).
  uint64_t unfinishedFrees;
  uint64_t deregsInFlight;
  uint64_t completionsIntoReleasedMemory;
  // Allreduces refused with SHARP_COLL_ENOT_SUPP because the fabric's capabilities lack the
  // datatype (NEZHA_SHARP_DOUBLE_GENERATION=2 has no bfloat16/int8/uint8).
  uint64_t unsupportedDatatypes;
  // The last sharp_coll_init / sharp_coll_comm_init arguments.
  int lastWorldLocalRank;
  int lastUserProgressNumPolls;
  int lastCollTimeout;
  int lastGroupWorldRanksNull;  // 1 when group_world_ranks was NULL
  char lastDevice[64];          // ib_dev_list as given
  char lastInterface[64];       // the interface it resolved to
};

using StatsFn = void (*)(Stats*);
using ResetFn = void (*)();

}  // namespace nezha::sharpdouble
