#!/usr/bin/env bash
# Test-bed failover of the recursive halving/doubling allreduce (docs/algorithms.md; needs root): three
# ranks (not a power of two: rank 0 folds into rank 1 first) run a loop of split 4 MiB allreduces
# that the algorithm table sends through halving/doubling on both rails. A rail cut and a black
# hole on one rank mid-loop must leave every result exact (loop mode checks each operation on
# every rank) with the rail failed over: the algorithm reads only its preserved input, so the
# failed rail's unfinished chunks are redone on the survivor like a ring's.
#
#   run_algorithms.sh NEZHA_BENCH TESTBED_SH
#
# Bed name `nza1`; everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TESTBED=$(realpath "$2")
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nza1 29900

TABLE=$WORK/hd.json
cat >"$TABLE" <<'JSON'
{"format": "nezha-algo/v1", "allreduce": [{"algorithm": "halving_doubling"}]}
JSON

bed_up 3 2

# Rail cut on rank 1 (the rank rank 0 folds into) in the middle of the loop.
loop_job hdcut 3 2 6 NEZHA_ALGO_TABLE="$TABLE" &
job=$!
until_running hdcut "$job"
cut_rail 1 1
wait $job || true
restore_rail 1 1
T=$WORK/hdcut.trace.json
if all_rc hdcut 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['completed'] > 0")" = True ]; then
  pass "halving/doubling, rail cut on rank 1: exact results over $(trace_get "$T" "t['completed']") ops," \
    "r1 failed over, longest op after it $(longest_op_ms "$T") ms"
else
  fail "halving/doubling, rail cut on rank 1"
  show hdcut 3
fi

# Black hole on rank 2's r1 (a participant that never folds): the watchdog takes r1 out.
loop_job hdhole 3 2 6 NEZHA_ALGO_TABLE="$TABLE" NEZHA_READMIT_HOLDDOWN_MS=0 &
job=$!
until_running hdhole "$job"
hole_rail 2 1 add
wait $job || true
hole_rail 2 1 delete
T=$WORK/hdhole.trace.json
if all_rc hdhole 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r1']" ]; then
  pass "halving/doubling, black hole on rank 2: exact results over $(trace_get "$T" "t['completed']") ops," \
    "r1 out ($(trace_get "$T" "t['failovers'][0]['reason']"))"
else
  fail "halving/doubling, black hole on rank 2"
  show_events "$T" 0
  show hdhole 3
fi

# The same table on both ranks runs; ranks whose tables differ are refused at start, every
# rank with the same message naming the setting.
if run_job same 2 1 NEZHA_ALGO_TABLE="$TABLE" -- --quiet --max-bytes 4K; then
  pass "same algorithm table on both ranks: the job runs"
else
  fail "same algorithm table on both ranks"
  show same 2
fi
OTHER=$WORK/ring.json
echo '{"format": "nezha-algo/v1", "allreduce": [{"algorithm": "ring"}]}' >"$OTHER"
# Per-rank tables: run_job gives every rank the same environment, so start these two by hand.
PORT=$((PORT + 1))
rdv="$(addr 0 0):$PORT"
pids=()
for i in 0 1; do
  t=$TABLE
  [ "$i" = 1 ] && t=$OTHER
  "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS="r0=r0:tcp" NEZHA_RANK="$i" \
    NEZHA_WORLD_SIZE=2 NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" \
    NEZHA_RENDEZVOUS_TIMEOUT_MS=20000 NEZHA_ALGO_TABLE="$t" "$BENCH" --quiet --max-bytes 4K \
    >"$WORK/differ.log.$i" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  echo "$rc" >"$WORK/differ.rc.$i"
done
expect_error differ 0 "rank 1 has settings {algo_table=sha256:"
expect_error differ 1 "rank 1 has settings {algo_table=sha256:"

testbed_end
