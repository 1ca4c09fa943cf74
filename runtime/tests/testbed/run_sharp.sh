#!/usr/bin/env bash
# Test-bed scenarios of the SHARP rail (docs/sharp.md; needs root). Three hosts with rails r0, r1
# (tcp) and r2 (sharp). The SHARP library is the named test double (runtime/tests/doubles/sharp,
# docs/sharp.md); its aggregation node, nezha-sharp-aggregator, runs in the switch namespace on
# an address of r2's bridge, so every SHARP allreduce really crosses the rail and is reduced
# there. Assertions: exact results on every rank, which rail carried what (the bench's split and
# the aggregator's own counters, never timing), failover of a cut / black-holed SHARP rail with
# exact results, its re-admission after the restore, and an aggregator unharmed by garbage.
#
#   run_sharp.sh NEZHA_BENCH TESTBED_SH AGGREGATOR LIBSHARP_COLL_DOUBLE
#
# Bed name `nzs1`; everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TESTBED=$(realpath "$2")
AGGREGATOR=$(realpath "$3")
SHARPLIB=$(realpath "$4")
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzs1 29900
AGG_ADDR=10.102.0.250 # on br-r2 in the switch namespace (rail 2 is 10.102.0.0/24)
AGG_PORT=7100
STATS=$WORK/aggregator.json
agg_pid=""
cleanup_extra() { [ -z "${agg_pid:-}" ] || { kill "$agg_pid" 2>/dev/null && wait "$agg_pid" 2>/dev/null; }; }
stat() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$STATS" "$1"; }
# r2 as sysfs shows an IPoIB port: port 1 of HCA mlx5_0 (dev_port is 0-based). The runtime
# finds "mlx5_0:1" there and hands the library that, the form the real library takes; the
# double resolves it back to r2 in the same tree. One tree serves every host (same names).
HCA=$WORK/hca
mkdir -p "$HCA/class/net/r2/device/infiniband/mlx5_0" "$HCA/class/infiniband/mlx5_0/ports/1/gids"
echo 0 >"$HCA/class/net/r2/dev_port"
echo InfiniBand >"$HCA/class/infiniband/mlx5_0/ports/1/link_layer"
echo fe80:0000:0000:0000:0000:0000:0000:0001 >"$HCA/class/infiniband/mlx5_0/ports/1/gids/0"
# The ranks' environment: r2 is the SHARP rail (the later NEZHA_RAILS wins over run_job's).
SHARP_ENV=("NEZHA_RAILS=r0=r0:tcp,r1=r1:tcp,r2=r2:sharp" NEZHA_SHARP_LIBRARY="$SHARPLIB"
  NEZHA_SHARP_DOUBLE_AGGREGATOR="$AGG_ADDR:$AGG_PORT" NEZHA_COLD_THRESHOLD=64K
  NEZHA_RDMA_SYSFS_ROOT="$HCA")

bed_up 3 3
ip -n "$BED-sw" addr add "$AGG_ADDR/24" dev br-r2
ip netns exec "$BED-sw" "$AGGREGATOR" --listen "$AGG_ADDR:$AGG_PORT" --stats "$STATS" \
  2>"$WORK/aggregator.log" &
agg_pid=$!
for _ in $(seq 100); do [ -s "$STATS" ] && break; sleep 0.05; done
[ -s "$STATS" ] || { log "aggregator did not start"; cat "$WORK/aggregator.log" >&2; exit 1; }

# sweep_splits NAME: per size line of rank 0's sweep, "bytes r2share check".
sweep_rows() {
  awk '$1 ~ /^[0-9]+$/ { split($8, s, ","); sub("r2=", "", s[3]); print $1, s[3], $9 }' "$WORK/$1.log.0"
}

# 1. Sizes 4 B .. 256 KiB, float32 sum, checked on every rank: below the cold threshold (64 KiB)
# every allreduce goes whole to the SHARP rail, from 64 KiB up the tcp rails split it and r2
# carries nothing; the aggregator reduced exactly the small ones.
before=$(stat allreduces)
if run_job sweep 3 3 "${SHARP_ENV[@]}" -- --check --iters 5 --min-bytes 4 --max-bytes 256K; then
  rows=$(sweep_rows sweep)
  small=$(echo "$rows" | awk '$1 < 65536' | wc -l)
  bad=$(echo "$rows" | awk '($1 < 65536 && $2 != "1.00") || ($1 >= 65536 && $2 != "0.00") || $3 != "ok"' | wc -l)
  done_here=$(($(stat allreduces) - before))
  if [ "$small" -ge 10 ] && [ "$bad" = 0 ] && [ "$done_here" -ge "$small" ] &&
    [ "$(stat groups_formed)" -ge 1 ]; then
    pass "sweep 4 B..256 KiB exact on 3 ranks: $small sizes < 64 KiB all on r2, reduced by the aggregator ($done_here allreduces), larger ones on r0+r1 only"
  else
    fail "sweep: want sizes < 64 KiB on r2 (aggregator), the rest on r0+r1, all exact (bad rows: $bad, aggregator ops: $done_here)"
    echo "$rows" >&2
  fi
else
  fail "sweep"
  show sweep 3
fi

# 2. What SHARP cannot do stays off r2: a product (no SHARP generation aggregates it) and a
# broadcast go to the tcp rails; a small float16 max (supported) goes to r2. No init probe in the
# first two jobs (the probe's own allreduce would use r2): the aggregator then sees exactly the
# bench's own result check per size (an int64 max allreduce, small, so on r2) and nothing else.
before=$(stat allreduces)
ok=1
run_job prod 3 3 "${SHARP_ENV[@]}" NEZHA_PROBE_BYTES=0 -- --check --iters 5 --reduce prod \
  --min-bytes 4 --max-bytes 4K || ok=0
run_job bcast 3 3 "${SHARP_ENV[@]}" NEZHA_PROBE_BYTES=0 -- --check --iters 5 --op broadcast \
  --min-bytes 4 --max-bytes 4K || ok=0
prod_on_r2=$(sweep_rows prod | awk '$2 != "0.00" || $3 != "ok"' | wc -l)
bcast_on_r2=$(sweep_rows bcast | awk '$2 != "0.00" || $3 != "ok"' | wc -l)
after_other=$(stat allreduces)
checks=$(($(sweep_rows prod | wc -l) + $(sweep_rows bcast | wc -l)))
run_job half 3 3 "${SHARP_ENV[@]}" -- --check --iters 5 --dtype float16 --reduce max --min-bytes 4 --max-bytes 4K || ok=0
half_off_r2=$(sweep_rows half | awk '$2 != "1.00" || $3 != "ok"' | wc -l)
if [ "$ok" = 1 ] && [ "$prod_on_r2" = 0 ] && [ "$bcast_on_r2" = 0 ] && [ "$((after_other - before))" = "$checks" ] &&
  [ "$half_off_r2" = 0 ] && [ "$(stat allreduces)" -gt "$after_other" ]; then
  pass "prod and broadcast on r0/r1 only (the aggregator saw just the $checks result checks), float16 max on r2, all exact"
else
  fail "unsupported op / other collective must avoid r2 (jobs ok: $ok; prod rows on r2: $prod_on_r2, bcast: $bcast_on_r2, half off r2: $half_off_r2; aggregator ops $before -> $after_other -> $(stat allreduces))"
  show prod 3
  show bcast 3
  show half 3
fi

# 2b. A fabric without the SHARPv3 datatypes (the double's NEZHA_SHARP_DOUBLE_GENERATION=2): the
# capabilities say so at start, every rank says it once, and small bfloat16 sums stay on the
# tcp rails (exact), never refused by the aggregator nor failing r2.
errors_before=$(stat op_errors)
ok=1
run_job bf16 3 3 "${SHARP_ENV[@]}" NEZHA_SHARP_DOUBLE_GENERATION=2 -- --check --iters 5 \
  --dtype bfloat16 --min-bytes 4 --max-bytes 4K || ok=0
bf16_on_r2=$(sweep_rows bf16 | awk '$2 != "0.00" || $3 != "ok"' | wc -l)
said=$(grep -c "bfloat16 not in its capabilities: stays on the byte rails" "$WORK/bf16.log.0" || true)
# And in /status: r2's offload_types, read from host 0 while a bfloat16 loop runs.
run_job bf16st 3 3 "${SHARP_ENV[@]}" NEZHA_SHARP_DOUBLE_GENERATION=2 \
  NEZHA_CONTROL_ADDR=127.0.0.1:9402 -- --quiet --dtype bfloat16 --max-bytes 4K --loop-seconds 3 &
st_job=$!
types=""
for ((i = 0; i < 150; i++)); do
  types=$("$TESTBED" exec --name "$BED" --host 0 -- curl -s "http://127.0.0.1:9402/status" |
    python3 -c "import json,sys; print(','.join([r['offload_types'] for r in json.load(sys.stdin)['rails'] if r['name'] == 'r2'][0]))" 2>/dev/null || true)
  [ -n "$types" ] && break
  sleep 0.1
done
wait "$st_job" || ok=0
if [ "$ok" = 1 ] && [ "$bf16_on_r2" = 0 ] && [ "$said" = 1 ] && [ "$(stat op_errors)" = "$errors_before" ] &&
  [ "$types" = "float32,float64,float16,int32,int64" ]; then
  pass "bfloat16 on a fabric without it: on r0/r1 only, exact, said once, /status offload_types $types"
else
  fail "bfloat16 without the capability (jobs ok: $ok; rows on r2: $bf16_on_r2; said $said times; /status offload_types '$types'; aggregator op errors $errors_before -> $(stat op_errors))"
  show bf16 3
  show bf16st 3
fi

# 3. Stray and garbage connections to the aggregator (it is a listener) while a job runs: each
# is turned away and counted; the job's results stay exact.
rejected=$(stat rejected_connections)
run_job stray 3 3 "${SHARP_ENV[@]}" -- --check --iters 20 --min-bytes 4 --max-bytes 16K &
job=$!
"$TESTBED" exec --name "$BED" --host 0 -- bash -c \
  "exec 3<>/dev/tcp/$AGG_ADDR/$AGG_PORT; printf 'GET / HTTP/1.0\r\n\r\n' >&3; head -c 64 /dev/urandom >&3; exec 3>&-" || true
"$TESTBED" exec --name "$BED" --host 1 -- bash -c "exec 3<>/dev/tcp/$AGG_ADDR/$AGG_PORT; exec 3>&-" || true
# A well-formed Hello claiming rank 0 of a group that is not there stays pending; the hello
# timeout (2 s) is not waited for: the connection closes after sending.
"$TESTBED" exec --name "$BED" --host 2 -- python3 -c "
import socket, struct
s = socket.create_connection(('$AGG_ADDR', $AGG_PORT))
s.sendall(struct.pack('<IIQQII', 0x48535a4e, 1, 1, 2, 2, 0) + b'\xff' * 40)
s.close()" || true
if wait $job && [ "$(sweep_rows stray | awk '$3 != "ok"' | wc -l)" = 0 ] &&
  [ "$(($(stat rejected_connections) - rejected))" -ge 2 ]; then
  pass "aggregator turned away $(($(stat rejected_connections) - rejected)) stray/garbage connection(s); the job's results stayed exact"
else
  fail "stray connections: want them refused and the job exact"
  show stray 3
fi

# 4. The SHARP rail cut on one host in the middle of a loop of small (cold, SHARP) allreduces:
# that host's library reports the port error, every rank finishes the operation on r0/r1 with
# exact results, and after the restore r2 is rebuilt (a new SHARP group) and carries the small
# allreduces again.
formed=$(stat groups_formed)
run_job cut 3 3 "${SHARP_ENV[@]}" NEZHA_IO_TIMEOUT_MS=10000 NEZHA_READMIT_HOLDDOWN_MS=300 -- \
  --quiet --max-bytes 4K --loop-seconds 6 --trace "$WORK/cut.trace.json" &
job=$!
# Cut only once the job's allreduces reach the aggregator (start-up time varies with load), and
# after a moment of steady state so the first operations ran on r2.
before=$(stat allreduces)
for _ in $(seq 600); do [ "$(stat allreduces)" -gt $((before + 100)) ] && break; sleep 0.1; done
[ "$(stat allreduces)" -gt $((before + 100)) ] || log "r2 cut: the job's allreduces never reached the aggregator"
cut_rail 1 2
sleep 1.5
restore_rail 1 2
wait $job || true
T=$WORK/cut.trace.json
if all_rc cut 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r2']" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r2']" ] &&
  [ "$(trace_get "$T" "t['op_split'][0] == [0, 0, 1] and t['op_split'][-1] == [0, 0, 1]")" = True ] &&
  [ "$(trace_get "$T" "any(s[2] == 0 for s in t['op_split'])")" = True ] &&
  [ "$(stat groups_formed)" -ge $((formed + 2)) ]; then
  pass "r2 cut mid-loop: exact results over $(trace_get "$T" "t['completed']") ops, r2 failed over" \
    "($(trace_get "$T" "t['failovers'][0]['reason']")), re-admitted with a new SHARP group, small allreduces back on it"
else
  fail "r2 cut: want exact results, one failover and one re-admission of r2, small ops on r2 at both ends"
  show_events "$T" "$(trace_get "$T" "t['start_unix']")"
  show cut 3
fi

# 5. Black hole on the SHARP rail (host 2 drops everything on r2, carrier stays up): the
# contribution never reaches the aggregator, no completion comes, the progress deadline fails
# the rail, the operation finishes on r0/r1 exactly; re-admission probes fail while the hole
# lasts and one succeeds after it.
# Opt-in (NEZHA_TESTBED_SHARP_HOLE=1) until a flake is understood: in one of five runs the trace
# showed no failover at all, as if the hole had no effect. The diagnostics below print the
# dropped-packet count and r2's use per operation when it happens. The rdma and tcp black-hole
# scenarios (run_rdma.sh, run_failover.sh) stay in make test.
if [ "${NEZHA_TESTBED_SHARP_HOLE:-0}" != 1 ]; then
  log "r2 black hole: skipped (opt-in: NEZHA_TESTBED_SHARP_HOLE=1)"
  log "aggregator: $(cat "$STATS")"
  testbed_end
  exit
fi
before=$(stat allreduces)
run_job hole 3 3 "${SHARP_ENV[@]}" NEZHA_IO_TIMEOUT_MS=10000 NEZHA_READMIT_HOLDDOWN_MS=300 -- \
  --quiet --max-bytes 4K --loop-seconds 8 --trace "$WORK/hole.trace.json" &
job=$!
# Open the hole only once the job's allreduces reach the aggregator. A fixed pause here was the
# likely flake: on a loaded machine start-up (rendezvous, preflight, SHARP group) outlasted it, the
# hole fell into start-up where connection retries hide it, and no operation ever met it.
for _ in $(seq 600); do [ "$(stat allreduces)" -gt "$before" ] && break; sleep 0.1; done
[ "$(stat allreduces)" -gt "$before" ] || log "r2 black hole: the job's allreduces never reached the aggregator"
hole_rail 2 2 add
sleep 3
# Packets the hole's rules dropped (proof the hole was there while the job ran).
dropped=$("$TESTBED" exec --name "$BED" --host 2 -- iptables -L OUTPUT -v -n -x | awk '$3 == "DROP" { n += $1 } END { print n + 0 }')
healed_at=$(date +%s.%N)
hole_rail 2 2 delete
wait $job || true
T=$WORK/hole.trace.json
if all_rc hole 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r2']" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions'] if r['t_unix'] < $healed_at]")" = "[]" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r2']" ] &&
  [ "$(trace_get "$T" "t['op_split'][-1] == [0, 0, 1]")" = True ]; then
  pass "r2 black hole: exact results, r2 out ($(trace_get "$T" "t['failovers'][0]['reason']"))," \
    "back $(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $healed_at, 2)") s after the hole closed"
else
  fail "r2 black hole: want exact results, r2 out during the hole, re-admitted after it ($dropped packets dropped;" \
    "ops with r2 unused: $(trace_get "$T" "sum(1 for s in t['op_split'] if s[2] == 0)") of $(trace_get "$T" "len(t['op_split'])"))"
  show_events "$T" "$healed_at"
  show hole 3
fi

log "aggregator: $(cat "$STATS")"
testbed_end
