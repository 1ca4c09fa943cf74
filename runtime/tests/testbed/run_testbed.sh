#!/usr/bin/env bash
# Test-bed integration of libnezha (needs root): ranks are nezha-bench processes in network
# namespaces built by hack/testbed.sh, one per "host", rails are real veth links through
# bridges. Checks results with --check for 2-4 ranks x 1-3 rails (sizes beyond 64 MiB),
# online tuning on heterogeneous shaped rails, and clear errors for bad input and a cut rail.
#
#   run_testbed.sh NEZHA_BENCH TESTBED_SH
#
# Bed name `nzr1` (plus netns `nzr-na`); everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TUNE=$(dirname "$BENCH")/nezha-tune
TESTBED=$(realpath "$2")
BED=nzr1
NA_NS=nzr-na
TOKEN="tb-$RANDOM$RANDOM"
WORK=$(mktemp -d /tmp/nzr-testbed.XXXXXX)
PORT=29600
failures=0
passes=0

log() { echo "testbed: $*" >&2; }
cleanup() {
  "$TESTBED" down --name "$BED" >/dev/null 2>&1 || true
  ip netns del "$NA_NS" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { log "needs root (network namespaces)"; exit 1; }

pass() { passes=$((passes + 1)); log "PASS $*"; }
fail() { failures=$((failures + 1)); log "FAIL $*"; }

addr() { "$TESTBED" addr --name "$BED" --host "$1" --rail "$2"; }

# run_job NAME HOSTS RAILS [VAR=VALUE ...] -- BENCH_ARGS...
# Starts one nezha-bench per host, waits for all; exit codes land in $WORK/NAME.rc.I, output in
# $WORK/NAME.log.I. Returns 0 iff every rank exited 0.
run_job() {
  local name=$1 hosts=$2 rails=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local spec="" k i
  for ((k = 0; k < rails; k++)); do spec+="${spec:+,}r$k=r$k:tcp"; done
  PORT=$((PORT + 1))
  local rdv
  rdv="$(addr 0 0):$PORT"
  local pids=()
  for ((i = 0; i < hosts; i++)); do
    "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS="$spec" NEZHA_RANK="$i" \
      NEZHA_WORLD_SIZE="$hosts" NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" \
      NEZHA_RENDEZVOUS_TIMEOUT_MS=20000 "${envs[@]}" "$BENCH" "$@" \
      >"$WORK/$name.log.$i" 2>&1 &
    pids+=($!)
  done
  local ok=0 rc
  for ((i = 0; i < hosts; i++)); do
    rc=0
    wait "${pids[$i]}" || rc=$?
    echo "$rc" >"$WORK/$name.rc.$i"
    [ "$rc" = 0 ] || ok=1
  done
  return $ok
}

show() { # name hosts: dump logs on failure
  local i
  for ((i = 0; i < $2; i++)); do sed "s/^/  [$1 rank $i] /" "$WORK/$1.log.$i" >&2; done
}

check_job() { # name hosts rails [env...] -- args
  local name=$1 hosts=$2
  if run_job "$@"; then pass "$name"; else fail "$name"; show "$name" "$hosts"; fi
}

expect_error() { # name rank pattern: rank's exit code non-zero and its log contains pattern
  local name=$1 rank=$2 pattern=$3
  if [ "$(cat "$WORK/$name.rc.$rank")" != 0 ] && grep -q -- "$pattern" "$WORK/$name.log.$rank"; then
    pass "$name (rank $rank: $pattern)"
  else
    fail "$name: rank $rank wanted non-zero exit and '$pattern'"
    sed "s/^/  [$name rank $rank] /" "$WORK/$name.log.$rank" >&2
  fi
}

"$TESTBED" down --name "$BED" >/dev/null 2>&1 || true
"$TESTBED" up --name "$BED" --hosts 4 --rails 3 >/dev/null

# ---- correctness across world sizes and rail counts (unshaped) -------------------------------
Q=(--quiet --check --warmup 1 --iters 2)
check_job ar_2x1 2 1 -- --op allreduce "${Q[@]}" --min-bytes 1 --max-bytes 4M --factor 7
check_job ar_2x3_int64_max 2 3 NEZHA_COLD_THRESHOLD=0 NEZHA_MIN_SLICE_BYTES=0 -- \
  --op allreduce --dtype int64 --reduce max "${Q[@]}" --min-bytes 8 --max-bytes 2M --factor 9
check_job ar_3x2_bf16 3 2 NEZHA_COLD_THRESHOLD=16K -- --op allreduce --dtype bfloat16 "${Q[@]}" \
  --min-bytes 2 --max-bytes 8M --factor 11
check_job rs_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op reduce_scatter --dtype float16 "${Q[@]}" \
  --min-bytes 6 --max-bytes 6M --factor 13
check_job ag_4x3 4 3 NEZHA_COLD_THRESHOLD=16K -- --op allgather --dtype int32 "${Q[@]}" \
  --min-bytes 16 --max-bytes 8M --factor 13
check_job bc_4x2 4 2 NEZHA_COLD_THRESHOLD=16K -- --op broadcast --root 3 --dtype float64 "${Q[@]}" \
  --min-bytes 8 --max-bytes 8M --factor 13
check_job ar_4x3_80M 4 3 NEZHA_COLD_THRESHOLD=64K -- --op allreduce --dtype float32 --quiet --check \
  --warmup 0 --iters 1 --min-bytes 80M --max-bytes 80M
check_job ar_3x3_prod_static 3 3 NEZHA_POLICY=static -- --op allreduce --reduce prod "${Q[@]}" \
  --min-bytes 4 --max-bytes 4M --factor 31
check_job ar_2x2_single 2 2 NEZHA_POLICY=single -- --op allreduce --reduce min "${Q[@]}" \
  --min-bytes 4 --max-bytes 1M --factor 31

# ---- online tuning on heterogeneous rails: 800 vs 300 Mbit/s -----------------------------------
# 50 hot operations of 16 MiB; the agreed split must move close to the bandwidth ratio 0.73/0.27
# (the probe's 1 MiB allreduce is a rough first guess). Ratios, not times, are asserted.
"$TESTBED" shape --name "$BED" --rail 0 --rate 800 >/dev/null
"$TESTBED" shape --name "$BED" --rail 1 --rate 300 >/dev/null
if run_job tune_4x2 4 2 NEZHA_COLD_THRESHOLD=1M -- --op allreduce --quiet --check --warmup 30 \
  --iters 20 --min-bytes 16M --max-bytes 16M --json "$WORK/tune.json"; then
  split=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["split"]["r0"])' "$WORK/tune.json")
  if /usr/bin/python3 -c 'import sys; s=float(sys.argv[1]); sys.exit(0 if 0.60 <= s <= 0.86 else 1)' "$split"; then
    pass "tune_4x2 (split r0=$split after 50 ops, bandwidth ratio 0.73)"
  else
    fail "tune_4x2: split r0=$split after 50 ops, want 0.60..0.86"
  fi
else
  fail tune_4x2
  show tune_4x2 4
fi

# nezha-tune builds a table offline; a later job loads it (rank 0 reads, shares over the net).
BENCH_SAVED=$BENCH
BENCH=$TUNE
if run_job tune_table 2 2 -- --quiet --min-bytes 64K --max-bytes 4M --factor 8 --warmup 10 \
  --iters 2 --out "$WORK/table.json"; then
  if /usr/bin/python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
assert t["format"] == "nezha-table/v1" and t["rails"] == ["r0", "r1"], t
assert t["cold_threshold"] is not None and t["entries"], t
assert all(abs(sum(e["ratios"].values()) - 1) < 1e-9 for e in t["entries"]), t
' "$WORK/table.json"; then
    pass "tune_table ($(grep -c bucket_bytes "$WORK/table.json") entries)"
  else
    fail "tune_table: bad table"
    cat "$WORK/table.json" >&2
  fi
else
  fail tune_table
  show tune_table 2
fi
BENCH=$BENCH_SAVED
check_job table_load 2 2 NEZHA_TABLE="$WORK/table.json" NEZHA_VERBOSE=1 -- "${Q[@]}" \
  --min-bytes 64K --max-bytes 4M --factor 8
"$TESTBED" shape --name "$BED" --rail 0 --rate 0 >/dev/null
"$TESTBED" shape --name "$BED" --rail 1 --rate 0 >/dev/null

# ---- bad input: clear errors, no hangs ---------------------------------------------------------
# Rank 1 holds a different token: refused by rank 0's rendezvous, which reports it missing.
PORT=$((PORT + 1))
rdv="$(addr 0 0):$PORT"
"$TESTBED" exec --name "$BED" --host 0 -- env NEZHA_RAILS=r0=r0:tcp NEZHA_RANK=0 NEZHA_WORLD_SIZE=2 \
  NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" NEZHA_RENDEZVOUS_TIMEOUT_MS=3000 "$BENCH" --quiet \
  >"$WORK/wrongtoken.log.0" 2>&1 &
p0=$!
rc1=0
"$TESTBED" exec --name "$BED" --host 1 -- env NEZHA_RAILS=r0=r0:tcp NEZHA_RANK=1 NEZHA_WORLD_SIZE=2 \
  NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN=wrong NEZHA_RENDEZVOUS_TIMEOUT_MS=3000 "$BENCH" --quiet \
  >"$WORK/wrongtoken.log.1" 2>&1 || rc1=$?
echo "$rc1" >"$WORK/wrongtoken.rc.1"
rc0=0
wait $p0 || rc0=$?
echo "$rc0" >"$WORK/wrongtoken.rc.0"
expect_error wrongtoken 1 "NEZHA_JOB_TOKEN"
expect_error wrongtoken 0 "missing ranks: 1"

run_job noiface 2 1 NEZHA_RAILS=r0=r9:tcp -- --quiet || true
expect_error noiface 0 'interface "r9" does not exist'

run_job rankrange 2 1 NEZHA_RANK=5 -- --quiet || true
expect_error rankrange 0 "NEZHA_RANK=5 must be < NEZHA_WORLD_SIZE=2"

run_job badrails 2 1 NEZHA_RAILS=r0=r0 -- --quiet || true
expect_error badrails 1 "has no ':transport'"

# Ranks disagreeing on the rail list: rank 1 brings two rails, rank 0 one.
PORT=$((PORT + 1))
rdv="$(addr 0 0):$PORT"
for i in 0 1; do
  rails="r0=r0:tcp"
  [ "$i" = 1 ] && rails="r0=r0:tcp,r1=r1:tcp"
  "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS="$rails" NEZHA_RANK="$i" \
    NEZHA_WORLD_SIZE=2 NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" \
    NEZHA_RENDEZVOUS_TIMEOUT_MS=5000 "$BENCH" --quiet >"$WORK/disagree.log.$i" 2>&1 &
  eval "pd$i=\$!"
done
for i in 0 1; do
  rc=0
  eval "wait \$pd$i" || rc=$?
  echo "$rc" >"$WORK/disagree.rc.$i"
done
expect_error disagree 0 "rank 1 has rails \[r0:tcp,r1:tcp\] but rank 0 has \[r0:tcp\]"
expect_error disagree 1 "rank 1 has rails"

# --check really checks: rank 1 sends float64 while rank 0 sums float32 (same bytes on the wire;
# policy single never holds the agreement round that would catch it), so results are wrong.
PORT=$((PORT + 1))
rdv="$(addr 0 0):$PORT"
for i in 0 1; do
  dtype=float32
  [ "$i" = 1 ] && dtype=float64
  "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS=r0=r0:tcp NEZHA_RANK="$i" \
    NEZHA_WORLD_SIZE=2 NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" NEZHA_POLICY=single \
    "$BENCH" --quiet --check --dtype "$dtype" --warmup 0 --iters 1 --min-bytes 4K --max-bytes 4K \
    >"$WORK/wrongresult.log.$i" 2>&1 &
  eval "pw$i=\$!"
done
for i in 0 1; do
  rc=0
  eval "wait \$pw$i" || rc=$?
  echo "$rc" >"$WORK/wrongresult.rc.$i"
done
if [ "$(cat "$WORK/wrongresult.rc.0")" = 1 ] && grep -q "wrong elements" "$WORK/wrongresult.log.0"; then
  pass "wrongresult (--check exits 1 on wrong results)"
else
  fail "wrongresult: want exit 1 and 'wrong elements' from rank 0"
  show wrongresult 2
fi

# Rendezvous unreachable: nobody listens there; bounded by the timeout.
rc=0
"$TESTBED" exec --name "$BED" --host 1 -- env NEZHA_RAILS=r0=r0:tcp NEZHA_RANK=1 NEZHA_WORLD_SIZE=2 \
  NEZHA_RENDEZVOUS="$(addr 0 0):1" NEZHA_JOB_TOKEN="$TOKEN" NEZHA_RENDEZVOUS_TIMEOUT_MS=1000 \
  "$BENCH" --quiet >"$WORK/unreach.log.1" 2>&1 || rc=$?
echo "$rc" >"$WORK/unreach.rc.1"
expect_error unreach 1 "cannot connect to $(addr 0 0):1"

# An interface that exists but has no IPv4 address (lo of a fresh namespace).
ip netns add "$NA_NS"
rc=0
ip netns exec "$NA_NS" env NEZHA_RAILS=r0=lo:tcp NEZHA_RANK=0 NEZHA_WORLD_SIZE=1 "$BENCH" --quiet \
  >"$WORK/noaddr.log.0" 2>&1 || rc=$?
echo "$rc" >"$WORK/noaddr.rc.0"
expect_error noaddr 0 'interface "lo" has no IPv4 address'

# ---- failover (issue 4): a cut rail leaves the split, every result stays exact ----------------
# Loop mode checks every operation on every rank (exit 1 on any wrong element, agreed by all) and
# rank 0's trace records the failovers. `trace_get FILE EXPR` evaluates EXPR on the trace `t`.
trace_get() { python3 -c "import json,sys; t=json.load(open(sys.argv[1])); print($2)" "$1"; }
# loop_job NAME HOSTS RAILS SECONDS [VAR=VALUE ...] -- starts the job in the background.
loop_job() {
  local name=$1 hosts=$2 rails=$3 secs=$4
  shift 4
  run_job "$name" "$hosts" "$rails" NEZHA_COLD_THRESHOLD=0 NEZHA_MIN_SLICE_BYTES=0 \
    NEZHA_IO_TIMEOUT_MS=10000 "$@" -- --quiet --max-bytes 4M --loop-seconds "$secs" \
    --trace "$WORK/$name.trace.json"
}
all_rc() { # name hosts want: every rank's exit code equals want
  local i
  for ((i = 0; i < $2; i++)); do [ "$(cat "$WORK/$1.rc.$i")" = "$3" ] || return 1; done
}
# Stall: the longest op that ended after the first failover, in ms.
stall_ms() {
  trace_get "$1" "round(max([d for (e, d) in t['ops'] if e >= t['failovers'][0]['t_unix']] or [0]) / 1e3)"
}

# One rank's rail cut (switch port down: only host 1 sees NO-CARRIER; host 0's sockets just go
# silent) in the middle of a 4 MiB split allreduce loop.
# Known gap (issue 4, runtime/README.md "Failover"): a cut that lands inside the per-op failure
# agreement round can end the job with a clear error instead of failing over. Until that is
# fixed this scenario gets ONE more attempt, and the first failure is printed as FLAKY so it
# stays visible; a second failure fails the suite.
cut_one_rank_rail() {
  loop_job cut1 2 2 6 &
  local job=$!
  sleep 2.5
  "$TESTBED" cut --name "$BED" --host 1 --rail 1 >/dev/null
  wait $job || true
  "$TESTBED" restore --name "$BED" --host 1 --rail 1 >/dev/null
  T=$WORK/cut1.trace.json
  all_rc cut1 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
    [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r1']" ] &&
    [ "$(trace_get "$T" "t['rail_states']['r1']")" = failed ] &&
    [ "$(trace_get "$T" "t['op_split'][-1] == [1, 0]")" = True ]
}
cut_attempt_ok=0
if cut_one_rank_rail; then
  cut_attempt_ok=1
else
  log "FLAKY cut one rank's rail: first attempt failed (known agreement-round gap); retrying once"
  show cut1 2
  sleep 3 # let the restored rail settle before the retry
  cut_one_rank_rail && cut_attempt_ok=1
fi
if [ "$cut_attempt_ok" = 1 ]; then
  pass "cut one rank's rail: exact results, r1 failed over, stall $(stall_ms "$T") ms," \
    "$(trace_get "$T" "t['completed']") ops"
else
  fail "cut one rank's rail"
  show cut1 2
fi

# The same rail cut on every host (three ranks).
loop_job cutall 3 2 6 &
job=$!
sleep 2.5
for h in 0 1 2; do "$TESTBED" cut --name "$BED" --host $h --rail 0 >/dev/null; done
wait $job || true
for h in 0 1 2; do "$TESTBED" restore --name "$BED" --host $h --rail 0 >/dev/null; done
T=$WORK/cutall.trace.json
if all_rc cutall 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r0']" ]; then
  pass "same rail cut on all ranks: exact results, stall $(stall_ms "$T") ms"
else
  fail "same rail cut on all ranks"
  show cutall 3
fi

# A rail flapping 10 times during the loop: results stay exact; it leaves at the first cut and
# the hold-down (2 s, doubling per re-admission) keeps it from re-entering more than once or
# twice while it flaps.
loop_job flap 2 2 8 &
job=$!
sleep 1.5
for _ in $(seq 10); do
  "$TESTBED" cut --name "$BED" --host 0 --rail 1 >/dev/null
  sleep 0.2
  "$TESTBED" restore --name "$BED" --host 0 --rail 1 >/dev/null
  sleep 0.2
done
wait $job || true
T=$WORK/flap.trace.json
if all_rc flap 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "1 <= len(t['failovers']) <= 3 and len(t['readmissions']) <= 2")" = True ]; then
  pass "flapping rail: exact results, $(trace_get "$T" "len(t['failovers'])") failover(s)," \
    "$(trace_get "$T" "len(t['readmissions'])") re-admission(s)"
else
  fail "flapping rail"
  show flap 2
fi

# Restore: the rail comes back after the hold-down and carries its share again.
loop_job readmit 2 2 9 NEZHA_READMIT_HOLDDOWN_MS=1000 &
job=$!
sleep 2
"$TESTBED" cut --name "$BED" --host 1 --rail 1 >/dev/null
sleep 2
"$TESTBED" restore --name "$BED" --host 1 --rail 1 >/dev/null
restored_at=$(date +%s.%N)
wait $job || true
T=$WORK/readmit.trace.json
if all_rc readmit 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['rail_states']['r1']")" = up ] &&
  [ "$(trace_get "$T" "t['op_split'][-1][1] > 0.1")" = True ]; then
  pass "restore: r1 re-admitted $(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $restored_at, 2)") s" \
    "after the restore, carrying $(trace_get "$T" "round(t['op_split'][-1][1], 2)") of the split"
else
  fail "restore: want r1 re-admitted and carrying a share"
  show readmit 2
fi

# Both rails of host 1 cut: every rank fails with a clear error, soon after the cut (the bound
# is the progress floor + the agreement's deadlines, far below the 10 s I/O timeout).
loop_job cutboth 2 2 30 &
job=$!
sleep 2
"$TESTBED" cut --name "$BED" --host 1 --rail 0 >/dev/null
"$TESTBED" cut --name "$BED" --host 1 --rail 1 >/dev/null
cut_at=$(date +%s.%N)
wait $job || true
took=$(python3 -c "import time; print(round(time.time() - $cut_at, 1))")
for r in 0 1; do "$TESTBED" restore --name "$BED" --host 1 --rail $r >/dev/null; done
T=$WORK/cutboth.trace.json
if all_rc cutboth 2 3 && grep -q "no rail left" "$WORK/cutboth.log.0" "$WORK/cutboth.log.1" &&
  [ "$(trace_get "$T" "t['error'] is not None")" = True ] &&
  python3 -c "import sys; sys.exit(0 if $took < 10 else 1)"; then
  pass "both rails cut: clear error on every rank ${took} s after the cut"
else
  fail "both rails cut (took ${took} s)"
  show cutboth 2
fi

# ---- rails really use their own NIC: same-subnet bed, where routing alone would send everything
# through r0. Each rail's interface counter must carry about its share of the traffic.
"$TESTBED" down --name "$BED" >/dev/null 2>&1 || true
"$TESTBED" up --name "$BED" --hosts 2 --rails 2 --same-subnet >/dev/null
txbytes() { ip netns exec "$BED-h0" cat "/sys/class/net/r$1/statistics/tx_bytes"; }
before0=$(txbytes 0) before1=$(txbytes 1)
if run_job bound 2 2 NEZHA_POLICY=static NEZHA_PROBE_BYTES=0 -- --quiet --check --warmup 0 \
  --iters 4 --min-bytes 16M --max-bytes 16M; then
  # Equal static split (no probe): 4 x 16 MiB allreduces, each rank sends 16 MiB per op; each
  # rail should carry half of that (>= 40% allows for headers and the setup traffic).
  sent0=$(($(txbytes 0) - before0)) sent1=$(($(txbytes 1) - before1))
  want=$((4 * 16 * 1048576 * 4 / 10))
  if [ "$sent0" -ge "$want" ] && [ "$sent1" -ge "$want" ]; then
    pass "bound (same subnet: r0 sent $sent0 B, r1 sent $sent1 B)"
  else
    fail "bound: r0 sent $sent0 B, r1 sent $sent1 B, want each >= $want"
  fi
else
  fail bound
  show bound 2
fi

log "$passes passed, $failures failed"
[ "$failures" = 0 ]
