#!/usr/bin/env bash
# Test-bed integration of libnezha (needs root): ranks are nezha-bench processes in network
# namespaces built by hack/testbed.sh, one per "host", rails are real veth links through
# bridges. Checks results with --check for 2-4 ranks x 1-3 rails (sizes beyond 64 MiB),
# online tuning on heterogeneous shaped rails, clear errors for bad input, and that each rail's
# traffic leaves through its own NIC. Failover scenarios: run_failover.sh.
#
#   run_testbed.sh NEZHA_BENCH TESTBED_SH
#
# Bed name `nzr1` (plus netns `nzr-na`); everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TUNE=$(dirname "$BENCH")/nezha-tune
TESTBED=$(realpath "$2")
NA_NS=nzr-na
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzr1 29600
cleanup_extra() { ip netns del "$NA_NS" 2>/dev/null; }

bed_up 4 3

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
check_job a2a_3x2 3 2 NEZHA_COLD_THRESHOLD=16K -- --op alltoall --dtype int64 "${Q[@]}" \
  --min-bytes 24 --max-bytes 6M --factor 13
check_job bc_4x2 4 2 NEZHA_COLD_THRESHOLD=16K -- --op broadcast --root 3 --dtype float64 "${Q[@]}" \
  --min-bytes 8 --max-bytes 8M --factor 13
check_job ar_4x3_80M 4 3 NEZHA_COLD_THRESHOLD=64K -- --op allreduce --dtype float32 --quiet --check \
  --warmup 0 --iters 1 --min-bytes 80M --max-bytes 80M
check_job ar_3x3_prod_static 3 3 NEZHA_POLICY=static -- --op allreduce --reduce prod "${Q[@]}" \
  --min-bytes 4 --max-bytes 4M --factor 31
check_job ar_2x2_single 2 2 NEZHA_POLICY=single -- --op allreduce --reduce min "${Q[@]}" \
  --min-bytes 4 --max-bytes 1M --factor 31

# --paired-policy: a second communicator (rendezvous port + 1) under another policy in the same
# launch, interleaved; each one's result is checked and the JSON carries both.
if run_job ar_3x2_paired 3 2 -- --op allreduce --quiet --check --warmup 2 --iters 12 \
  --min-bytes 1K --max-bytes 256K --factor 8 --paired-policy single --json "$WORK/paired.json"; then
  if /usr/bin/python3 - "$WORK/paired.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
sys.exit(0 if d.get("paired_policy") == "single" and d["policy"] == "adaptive" and len(rows) == 3 and all(
    r["check"] == "ok" and r["paired"]["time_us"] > 0 and r["op_trimmed_us"] > 0 for r in rows) else 1)
PY
  then pass ar_3x2_paired; else fail "ar_3x2_paired: $(cat "$WORK/paired.json")"; fi
else
  fail ar_3x2_paired
  show ar_3x2_paired 3
fi
PORT=$((PORT + 1)) # the paired communicator's port

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
  NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN=0000000000000000000000000000000000000000000000000000000000000000 NEZHA_RENDEZVOUS_TIMEOUT_MS=3000 "$BENCH" --quiet \
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

# ---- rails really use their own NIC: same-subnet bed, where routing alone would send everything
# through r0. Each rail's interface counter must carry about its share of the traffic.
bed_up 2 2 --same-subnet
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

testbed_end
