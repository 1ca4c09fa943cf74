#!/usr/bin/env bash
# Test-bed scenarios of the RDMA rail (docs/rdma.md; needs root): nezha-bench ranks in network
# namespaces (hack/testbed.sh) whose rails use `transport: rdma`, run against the libibverbs
# test double (runtime/tests/doubles/ibverbs) through LD_LIBRARY_PATH. Each host gets a fixture
# sysfs tree with one fake HCA per rail interface (RoCE v2 GID = the rail's address), which the
# runtime's discovery and the double both read (NEZHA_RDMA_SYSFS_ROOT); the double carries
# every queue pair's bytes over the rail itself. Checks exact collectives on rdma rails and on
# one rdma + one tcp rail, a cut, a black hole, a gray rail and re-admission with rebuilt
# queue pairs.
#
#   run_rdma.sh NEZHA_BENCH TESTBED_SH IBVERBS_DOUBLE_DIR
#
# Bed name `nzd1`; everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TESTBED=$(realpath "$2")
IBV_DOUBLE=$(realpath "$3")
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzd1 30000
RDMA_SYSFS=$WORK/sysfs
[ -e "$IBV_DOUBLE/libibverbs.so.1" ] || { log "no libibverbs double in $IBV_DOUBLE"; exit 1; }

HOSTS=3
RAILS=2
bed_up "$HOSTS" "$RAILS"

rdma_fixtures "$HOSTS" "$RAILS"

# ---- exact collectives ---------------------------------------------------------------------
Q=(--quiet --check --warmup 1 --iters 2)
export TRANSPORTS="rdma rdma"
check_job rdma_ar_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op allreduce "${Q[@]}" --min-bytes 4 \
  --max-bytes 16M --factor 13
check_job rdma_ag_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op allgather --dtype int32 "${Q[@]}" \
  --min-bytes 12 --max-bytes 6M --factor 17
check_job rdma_bc_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op broadcast --root 2 --dtype float64 \
  "${Q[@]}" --min-bytes 8 --max-bytes 8M --factor 17
check_job rdma_rs_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op reduce_scatter --dtype float16 \
  "${Q[@]}" --min-bytes 6 --max-bytes 6M --factor 17
export TRANSPORTS="rdma tcp"
check_job mixed_ar_3x2_int64_max 3 2 NEZHA_COLD_THRESHOLD=0 NEZHA_MIN_SLICE_BYTES=0 -- \
  --op allreduce --dtype int64 --reduce max "${Q[@]}" --min-bytes 8 --max-bytes 16M --factor 9

# ---- failures on the rdma rail (r1), with r0 on tcp -------------------------------------------
export TRANSPORTS="tcp rdma"

# Cut, then restore: r1 fails over (its QPs' work completes with errors, the cut host's HCA
# reports a port error), the ops stay exact, and r1 is rebuilt (new device context, new QPs)
# and re-admitted once the link is back.
loop_job cut 2 2 9 NEZHA_READMIT_HOLDDOWN_MS=1000 &
job=$!
until_running cut "$job"
cut_rail 1 1
sleep 2
restore_rail 1 1
restored_at=$(date +%s.%N)
wait $job || true
T=$WORK/cut.trace.json
# r1 carries data again: its mean share of the ops since its re-admission. Not one op's share:
# the split is re-tuned every few ops and the rdma double's share here moves between about 0.08
# and 0.22 from op to op (a rail never re-admitted has 0).
r1_share_after_readmission="(lambda s: sum(s) / max(len(s), 1))([x[1] for x in t['op_split'][t['readmissions'][0]['op']:]])"
if all_rc cut 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[(f['rail'], 1 in f['ranks']) for f in t['failovers']]")" = "[('r1', True)]" ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "$r1_share_after_readmission > 0.05")" = True ]; then
  pass "rdma rail cut and restored: exact over $(trace_get "$T" "t['completed']") ops, r1 out" \
    "($(trace_get "$T" "t['failovers'][0]['reason']")), re-admitted with new QPs" \
    "$(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $restored_at, 2)") s after the restore," \
    "carrying $(trace_get "$T" "round(100 * $r1_share_after_readmission)") % of each op since"
else
  fail "rdma rail cut and restored"
  show_events "$T" "$restored_at"
  show cut 2
fi

# Black hole: host 1 drops everything on r1, link up. The double's QPs simply stop completing;
# the watchdog takes r1 out, probes fail while the hole lasts, r1 is back after it.
loop_job hole 2 2 12 NEZHA_READMIT_HOLDDOWN_MS=500 &
job=$!
until_running hole "$job"
hole_rail 1 1 add
sleep 4
healed_at=$(date +%s.%N)
hole_rail 1 1 delete
wait $job || true
T=$WORK/hole.trace.json
if all_rc hole 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[(f['rail'], f['reason']) for f in t['failovers']]")" = "[('r1', 'watchdog')]" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions'] if r['t_unix'] < $healed_at]")" = "[]" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r1']" ]; then
  pass "rdma black hole: r1 out by the watchdog, $(trace_get "$T" "len(t['rejected_readmissions'])")" \
    "probe(s) refused during the hole, back $(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $healed_at, 2)") s after it"
else
  fail "rdma black hole: want r1 out (watchdog), no re-admission during the hole, back after it"
  show_events "$T" "$healed_at"
  show hole 2
fi

# Gray rail: host 1's rdma r1 suddenly at 5 Mbit/s (~1000x slower). Completions keep coming,
# slowly; r1 leaves as slow (or watchdog), its probe keeps it out while shaped, it comes back
# after. Results exact throughout.
loop_job gray 2 2 14 NEZHA_READMIT_HOLDDOWN_MS=500 &
job=$!
until_running gray "$job"
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc replace dev r1 root tbf rate 5mbit burst 128kb latency 50ms
sleep 5
healed_at=$(date +%s.%N)
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc del dev r1 root
wait $job || true
T=$WORK/gray.trace.json
if all_rc gray 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']][:1]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['failovers'][0]['reason'] in ('slow', 'watchdog')")" = True ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions'] if r['t_unix'] < $healed_at]")" = "[]" ] &&
  [ "$(trace_get "$T" "t['rail_states']['r1']")" = up ]; then
  pass "rdma gray rail: r1 out as $(trace_get "$T" "t['failovers'][0]['reason']"), kept out while" \
    "shaped, back after; longest op $(trace_get "$T" "round(max(d for (e, d) in t['ops']) / 1e6, 2)") s"
else
  fail "rdma gray rail: want r1 out as slow, kept out while slow, back afterwards"
  show_events "$T" "$healed_at"
  show gray 2
fi

# Both rails rdma, three ranks, one rank's r0 cut for good: exact on r1 alone.
export TRANSPORTS="rdma rdma"
loop_job cutall 3 2 5 &
job=$!
until_running cutall "$job"
cut_rail 2 0
wait $job || true
restore_rail 2 0
T=$WORK/cutall.trace.json
if all_rc cutall 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r0']" ] &&
  [ "$(trace_get "$T" "t['op_split'][-1] == [0, 1]")" = True ]; then
  pass "two rdma rails, r0 cut on one of three ranks: exact on r1 over $(trace_get "$T" "t['completed']") ops"
else
  fail "two rdma rails, r0 cut on one of three ranks"
  show cutall 3
fi

testbed_end
