#!/usr/bin/env bash
# Test-bed failover scenarios of libnezha (runtime/README.md; needs root): ranks are nezha-bench loop jobs
# in network namespaces built by hack/testbed.sh, a "cut" takes a host's switch port down (only
# that host sees NO-CARRIER; its peers' sockets just go silent). Every scenario asserts exact
# results on every operation (loop mode checks each one on every rank), bounded completion and
# the failover / re-admission events rank 0 recorded.
#
#   run_failover.sh NEZHA_BENCH TESTBED_SH
#
# Bed name `nzf1`; everything is torn down on exit.
set -euo pipefail
BENCH=$(realpath "$1")
TESTBED=$(realpath "$2")
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzf1 29800
# The control endpoint listens on the host's own loopback here (the test bed's hosts have no
# pod network; a rail address is refused). Mutating requests are signed per request with the
# job's token (runtime/tools/nezha_control_sign.py; docs/security.md "Control endpoint").
SIGN=$(dirname "$(realpath "$0")")/../../tools/nezha_control_sign.py
# signed METHOD PATH [TOKEN]: a fresh Authorization value for that request (the job's token by default).
signed() { NEZHA_JOB_TOKEN=${3:-$TOKEN} python3 "$SIGN" "$1" "$2"; }
# http HOST METHOD PATH [AUTHORIZATION]: the HTTP status of a request to that host's endpoint.
http() {
  local auth=()
  [ -n "${4:-}" ] && auth=(-H "Authorization: $4")
  "$TESTBED" exec --name "$BED" --host "$1" -- curl -s -o /dev/null -w '%{http_code}' \
    "${auth[@]}" -X "$2" "http://127.0.0.1:9402$3"
}
# rail_state HOST RAIL: that rail's state in the host's GET /status ("" while it does not answer).
rail_state() {
  "$TESTBED" exec --name "$BED" --host "$1" -- curl -s "http://127.0.0.1:9402/status" |
    python3 -c "import json,sys; print([r['state'] for r in json.load(sys.stdin)['rails'] if r['name'] == sys.argv[1]][0])" "$2" 2>/dev/null || true
}
# until_state HOST RAIL STATE: waits (bounded, 15 s) for the rail to report STATE.
until_state() {
  local i
  for ((i = 0; i < 150; i++)); do
    [ "$(rail_state "$1" "$2")" = "$3" ] && return 0
    sleep 0.1
  done
  return 1
}

METRICSLINT=$WORK/metricslint
(cd "$(dirname "$(realpath "$0")")/../../.." && go build -o "$METRICSLINT" ./hack/tools/metricslint)

bed_up 3 2

# One rank's rail cut in the middle of a 4 MiB split allreduce loop: the cut host tells its peer
# over r0 at once, both redo r1's unfinished part on r0.
loop_job cut1 2 2 6 &
job=$!
until_running cut1 "$job"
cut_rail 1 1
wait $job || true
restore_rail 1 1
T=$WORK/cut1.trace.json
if all_rc cut1 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[(f['rail'], f['ranks']) for f in t['failovers']]")" = "[('r1', [1])]" ] &&
  [ "$(trace_get "$T" "t['rail_states']['r1']")" = failed ] &&
  [ "$(trace_get "$T" "t['op_split'][-1] == [1, 0]")" = True ]; then
  pass "cut one rank's rail: exact results, r1 failed over (seen by rank 1), longest op after it $(longest_op_ms "$T") ms," \
    "$(trace_get "$T" "t['completed']") ops"
else
  fail "cut one rank's rail (exit codes $(cat "$WORK/cut1.rc.0") $(cat "$WORK/cut1.rc.1"); want 0 0," \
    "one failover of r1 naming rank 1 alone, r1 failed, the last op on r0 alone)"
  show_events "$T" "$(trace_get "$T" "t['start_unix']")"
  show cut1 2
fi

# The same rail cut on every host (three ranks).
loop_job cutall 3 2 6 &
job=$!
until_running cutall "$job"
for h in 0 1 2; do cut_rail $h 0; done
wait $job || true
for h in 0 1 2; do restore_rail $h 0; done
T=$WORK/cutall.trace.json
if all_rc cutall 3 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']]")" = "['r0']" ]; then
  pass "same rail cut on all ranks: exact results, longest op after it $(longest_op_ms "$T") ms"
else
  fail "same rail cut on all ranks"
  show cutall 3
fi

# Cut during rendezvous: host 1's r1 has no carrier when the ranks start. The job starts on r0
# alone on every rank (a failover at op 0, seen by rank 1), and r1 joins once restored.
cut_rail 1 1
loop_job rdvcut 2 2 8 NEZHA_READMIT_HOLDDOWN_MS=1000 &
job=$!
until_running rdvcut "$job"
restore_rail 1 1
restored_at=$(date +%s.%N)
wait $job || true
T=$WORK/rdvcut.trace.json
if all_rc rdvcut 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[(f['rail'], f['op'], f['ranks']) for f in t['failovers']]")" = "[('r1', 0, [1])]" ] &&
  [ "$(trace_get "$T" "t['op_split'][0] == [1, 0]")" = True ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['op_split'][-1][1] > 0.1")" = True ]; then
  pass "cut during rendezvous: started on r0, r1 joined $(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $restored_at, 2)") s" \
    "after the restore, carrying $(trace_get "$T" "round(t['op_split'][-1][1], 2)") of the split"
else
  fail "cut during rendezvous: want a start on r0 alone, then r1 re-admitted"
  show rdvcut 2
fi

# A rail flapping 10 times during a loop of at least 200 operations: results stay exact; it
# leaves at the first cut and the hold-down (0.5 s, doubling per re-admission) keeps it from
# re-entering more than once or twice while it flaps.
loop_job flap 2 2 8 &
job=$!
until_running flap "$job"
for _ in $(seq 10); do
  cut_rail 0 1
  sleep 0.2
  restore_rail 0 1
  sleep 0.2
done
wait $job || true
T=$WORK/flap.trace.json
if all_rc flap 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "t['completed'] >= 200")" = True ] &&
  [ "$(trace_get "$T" "1 <= len(t['failovers']) <= 3 and len(t['readmissions']) <= 2")" = True ]; then
  pass "flapping rail: exact results over $(trace_get "$T" "t['completed']") ops," \
    "$(trace_get "$T" "len(t['failovers'])") failover(s), $(trace_get "$T" "len(t['readmissions'])") re-admission(s)"
else
  fail "flapping rail"
  show flap 2
fi

# Restore: the rail comes back after the hold-down and carries its share again.
loop_job readmit 2 2 9 NEZHA_READMIT_HOLDDOWN_MS=1000 NEZHA_VERBOSE=1 &
job=$!
until_running readmit "$job"
cut_rail 1 1
sleep 2
restore_rail 1 1
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

# Planned maintenance through the control endpoint: drain r1 on rank 0 only, restore it on
# rank 1 only; both are applied by every rank at an agreed operation. No failover happens.
loop_job drain 2 2 20 NEZHA_CONTROL_ADDR=127.0.0.1:9402 &
job=$!
until_state 0 r1 healthy && until_state 1 r1 healthy
codes="nocred=$(http 0 POST /rails/r1/drain)"
codes+=" badcred=$(http 0 POST /rails/r1/drain "$(signed POST /rails/r1/drain "${TOKEN//?/0}")")"
drain_auth=$(signed POST /rails/r1/drain)
codes+=" drain=$(http 0 POST /rails/r1/drain "$drain_auth") replay=$(http 0 POST /rails/r1/drain "$drain_auth")"
until_state 0 r1 drained && until_state 1 r1 drained && states=drained/drained ||
  states="$(rail_state 0 r1)/$(rail_state 1 r1)"
codes+=" nosuch=$(http 0 POST /rails/nosuch/drain "$(signed POST /rails/nosuch/drain)")"
codes+=" get=$(http 1 GET /rails/r1/drain) restore=$(http 1 POST /rails/r1/restore "$(signed POST /rails/r1/restore)")"
# The runtime's /metrics passes the checks of `promtool check metrics` (hack/tools/metricslint).
"$TESTBED" exec --name "$BED" --host 0 -- curl -s "http://127.0.0.1:9402/metrics" >"$WORK/metrics.txt"
if lint=$("$METRICSLINT" "$WORK/metrics.txt" 2>&1) && grep -q '^nezha_runtime_drains_total{' "$WORK/metrics.txt"; then
  pass "runtime /metrics passes promlint ($(grep -c '^# TYPE' "$WORK/metrics.txt") families)"
else
  fail "runtime /metrics: promlint: $lint"
fi
until_state 0 r1 healthy && until_state 1 r1 healthy
wait $job || true
T=$WORK/drain.trace.json
if all_rc drain 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$codes" = "nocred=401 badcred=401 drain=202 replay=401 nosuch=404 get=405 restore=202" ] &&
  [ "$states" = "drained/drained" ] &&
  [ "$(trace_get "$T" "t['failovers']")" = "[]" ] &&
  [ "$(trace_get "$T" "any(s[1] == 0 for s in t['op_split'])")" = True ] &&
  [ "$(trace_get "$T" "t['op_split'][-1][1] > 0.1")" = True ]; then
  pass "drain/restore via the endpoint: both ranks drained, $(trace_get "$T" "sum(s[1] == 0 for s in t['op_split'])")" \
    "ops on r0 alone, r1 back with $(trace_get "$T" "round(t['op_split'][-1][1], 2)") of the split, no failover"
else
  fail "drain/restore via the endpoint (HTTP: $codes; states: $states)"
  show drain 2
fi

# Black hole: host 1 drops everything on r1 (iptables, link stays up). The watchdog takes r1 out
# (nothing moved on it while r0 did); re-admission probes fail in the background while the
# hole lasts, so r1 never re-enters then; once the hole is gone, a probe passes and r1 is back.
loop_job hole 2 2 14 NEZHA_READMIT_HOLDDOWN_MS=500 &
job=$!
until_running hole "$job"
hole_rail 1 1 add
sleep 5
healed_at=$(date +%s.%N)
hole_rail 1 1 delete
wait $job || true
T=$WORK/hole.trace.json
if all_rc hole 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[(f['rail'], f['reason'], 1 in f['ranks']) for f in t['failovers']]")" = "[('r1', 'watchdog', True)]" ] &&
  [ "$(trace_get "$T" "len(t['rejected_readmissions']) >= 1 and all(r['reason'] == 'probe' for r in t['rejected_readmissions'])")" = True ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions'] if r['t_unix'] < $healed_at]")" = "[]" ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['op_split'][-1][1] > 0.1")" = True ]; then
  pass "black hole: r1 out by the watchdog, $(trace_get "$T" "len(t['rejected_readmissions'])") probe(s) refused during the hole," \
    "back $(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $healed_at, 2)") s after it healed"
else
  fail "black hole: want r1 out (watchdog), no re-admission during the hole, back after it"
  show_events "$T" "$healed_at"
  show hole 2
fi

# Gray failure: host 1's r1 suddenly runs at 5 Mbit/s (from veth speed: ~1000x slower). The rail
# leaves as slow (its slice far behind while r0 finished), the re-admission probe measures it
# below the bandwidth floor so it stays out, and once the shaping is lifted it comes back with
# the share its probe measured. Results exact throughout.
loop_job gray 2 2 16 NEZHA_READMIT_HOLDDOWN_MS=500 &
job=$!
until_running gray "$job"
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc replace dev r1 root tbf rate 5mbit burst 128kb latency 50ms
sleep 6
healed_at=$(date +%s.%N)
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc del dev r1 root
wait $job || true
T=$WORK/gray.trace.json
if all_rc gray 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "[f['rail'] for f in t['failovers']][:1]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['failovers'][0]['reason'] in ('slow', 'watchdog')")" = True ] &&
  [ "$(trace_get "$T" "any(r['reason'] == 'slow' for r in t['rejected_readmissions'])")" = True ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions'] if r['t_unix'] < $healed_at]")" = "[]" ] &&
  [ "$(trace_get "$T" "t['rail_states']['r1']")" = up ]; then
  pass "gray rail: r1 out as $(trace_get "$T" "t['failovers'][0]['reason']"), kept out by its probe" \
    "($(trace_get "$T" "round(min(r['measured_bandwidth_bytes_per_s'] for r in t['rejected_readmissions'] if r['reason'] == 'slow') / 1e6, 2)") MB/s)," \
    "back after the shaping was lifted; longest op $(trace_get "$T" "round(max(d for (e, d) in t['ops']) / 1e6, 2)") s"
else
  fail "gray rail: want r1 out as slow, kept out while slow, back afterwards"
  show_events "$T" "$healed_at"
  show gray 2
fi

# Gray from the start: host 1's r1 is already at 5 Mbit/s when the ranks start. Start-up measures
# it slow, so it gets almost no share (nothing to fail over: the split keeps it out of the way);
# once the shaping is lifted its share comes back from timing alone. Results exact throughout.
# (CI once met this by accident: a fault meant for a running job landed during a slow start-up.)
# With the default NEZHA_MIN_SLICE_BYTES its start-up share (~0.1 % of 4 MiB) earns no slice at
# all, so only the scheduler's probe slices can show the tuner that it healed: the first probe
# while shaped makes the next wait ~5 % of the job's time (runtime/README "Tune"), hence the
# longer loop.
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc replace dev r1 root tbf rate 5mbit burst 128kb latency 50ms
loop_job grayearly 2 2 24 NEZHA_MIN_SLICE_BYTES=32K &
job=$!
until_running grayearly "$job"
sleep 3 # how long the rail stays gray while the job runs
healed_at=$(date +%s.%N)
"$TESTBED" exec --name "$BED" --host 1 -- tc qdisc del dev r1 root
wait $job || true
T=$WORK/grayearly.trace.json
# r1's share: the largest of any op that ended while shaped, the mean of the last 50 ops; when it
# first carried a fifth of an operation after the heal.
shaped_share="max([s[1] for (e, d), s in zip(t['ops'], t['op_split']) if e < $healed_at])"
healed_share="sum(s[1] for s in t['op_split'][-50:]) / 50"
back_after="round(min([e for (e, d), s in zip(t['ops'], t['op_split']) if e > $healed_at and s[1] > 0.2] or [0]) - $healed_at, 2)"
if all_rc grayearly 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$(trace_get "$T" "$shaped_share < 0.05")" = True ] &&
  [ "$(trace_get "$T" "$healed_share > 0.2")" = True ]; then
  pass "gray from the start (default min slice): r1's share at most $(trace_get "$T" "round($shaped_share, 4)") while shaped," \
    "a fifth again $(trace_get "$T" "$back_after") s after the heal, $(trace_get "$T" "round($healed_share, 2)") at the end;" \
    "exact over $(trace_get "$T" "t['completed']") ops"
else
  fail "gray from the start: want r1 nearly unused while shaped, its share back after, exact results"
  show_events "$T" "$healed_at"
  show grayearly 2
fi

# A ready file that cannot be made (its directory does not exist): rank 0 says why, and every rank
# stops after the next operation with exit 3 instead of running on with nothing for the harness to
# wait on.
run_job readyfail 2 2 -- --quiet --max-bytes 64K --loop-seconds 60 \
  --trace "$WORK/readyfail.trace.json" --ready-file "$WORK/no-such-dir/ready" || true
T=$WORK/readyfail.trace.json
if all_rc readyfail 2 3 && grep -q "cannot create --ready-file $WORK/no-such-dir/ready: No such file" "$WORK/readyfail.log.0" &&
  [ "$(trace_get "$T" "t['completed'] == 21 and 'ready-file' in t['error']['message']")" = True ] &&
  grep -q "rank 0 could not create its --ready-file" "$WORK/readyfail.log.1" &&
  [ ! -e "$WORK/no-such-dir" ]; then
  pass "ready file that cannot be made: every rank stopped after op 21 with exit 3, rank 0 names the file"
else
  fail "ready file that cannot be made: want exit 3 on every rank after op 21 and the reason in rank 0's log"
  show readyfail 2
fi

# Both rails of host 1 cut: every rank fails with the same family of clear error: host 1 names its
# own down links (whichever detector fires first there), host 0 names the silent peer. The
# bound is generous (the loop would run 30 s): it catches a hang, not a slow machine.
loop_job cutboth 2 2 30 &
job=$!
until_running cutboth "$job"
cut_rail 1 0
cut_rail 1 1
cut_at=$(date +%s.%N)
wait $job || true
took=$(python3 -c "import time; print(round(time.time() - $cut_at, 1))")
for r in 0 1; do restore_rail 1 $r; done
T=$WORK/cutboth.trace.json
family="no rail left to finish it on"
if all_rc cutboth 2 3 && grep -q "$family" "$WORK/cutboth.log.0" &&
  grep -q "$family (every link of this rank is down: r0 (r0), r1 (r1))" "$WORK/cutboth.log.1" &&
  grep -q "rank(s) 1 " "$WORK/cutboth.log.0" &&
  [ "$(trace_get "$T" "t['error'] is not None")" = True ] &&
  python3 -c "import sys; sys.exit(0 if $took < 20 else 1)"; then
  pass "both rails cut: the same clear error family on every rank ${took} s after the cut"
else
  fail "both rails cut (took ${took} s)"
  show cutboth 2
fi

# Pre-flight (NEZHA_PREFLIGHT): host 1's r1 is a black hole before the job starts (carrier up,
# everything dropped), so the start-up check cannot connect it. preflight_get HOST EXPR evaluates
# EXPR on the `p` = /status "preflight" document of that host ("" while it does not answer).
preflight_get() {
  "$TESTBED" exec --name "$BED" --host "$1" -- curl -s "http://127.0.0.1:9402/status" |
    python3 -c "import json,sys; p=json.load(sys.stdin)['preflight']; print($2)" 2>/dev/null || true
}
until_preflight() { # HOST EXPR: waits (bounded, 20 s) until EXPR is True
  local i
  for ((i = 0; i < 200; i++)); do
    [ "$(preflight_get "$1" "$2")" = True ] && return 0
    sleep 0.1
  done
  return 1
}
# fail: every rank stops with one error naming the failing pair.
hole_rail 1 1 add
run_job pffail 2 2 NEZHA_PREFLIGHT=fail NEZHA_PREFLIGHT_TIMEOUT_MS=1500 -- --quiet --max-bytes 64K || true
hole_rail 1 1 delete
expect_error pffail 0 "pre-flight failed (NEZHA_PREFLIGHT=fail): rail r1: rank 0 -> rank 1"
expect_error pffail 1 "pre-flight failed (NEZHA_PREFLIGHT=fail): rail r1: rank .* -> rank"

# degrade (the default): the job starts on r0 alone, /status lists the failing pairs; once the
# hole is gone r1 joins through re-admission and the check reads "recovered".
hole_rail 1 1 add
loop_job pfdeg 2 2 12 NEZHA_PREFLIGHT_TIMEOUT_MS=1500 NEZHA_CONTROL_ADDR=127.0.0.1:9402 &
job=$!
until_preflight 0 "p['result'] == 'failed'" &&
  listed=$(preflight_get 0 "sorted((f['rank'], f['rail']) for f in p['failures'])") || listed="(no answer)"
healed_at=$(date +%s.%N)
hole_rail 1 1 delete
until_preflight 0 "p['result'] == 'recovered'" && recovered=yes || recovered=no
wait $job || true
T=$WORK/pfdeg.trace.json
if all_rc pfdeg 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] &&
  [ "$listed" = "[(0, 'r1'), (1, 'r1')]" ] && [ "$recovered" = yes ] &&
  [ "$(trace_get "$T" "[(f['rail'], f['op'], f['reason']) for f in t['failovers']]")" = "[('r1', 0, 'preflight')]" ] &&
  [ "$(trace_get "$T" "t['op_split'][0] == [1, 0]")" = True ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['op_split'][-1][1] > 0.1")" = True ]; then
  pass "pre-flight degrade: started on r0, failing pairs $listed in /status, r1 back" \
    "$(trace_get "$T" "round(t['readmissions'][0]['t_unix'] - $healed_at, 2)") s after the hole healed"
else
  fail "pre-flight degrade (listed: $listed, recovered: $recovered)"
  show_events "$T" "$healed_at"
  show pfdeg 2
fi

# wait: no operation runs until r1 is back; the first one is split over both rails.
hole_rail 1 1 add
loop_job pfwait 2 2 3 NEZHA_PREFLIGHT=wait NEZHA_PREFLIGHT_TIMEOUT_MS=1500 NEZHA_CONTROL_ADDR=127.0.0.1:9402 &
job=$!
until_preflight 0 "p['result'] == 'waiting'" && waited=yes || waited=no
hole_rail 1 1 delete
wait $job || true
T=$WORK/pfwait.trace.json
if all_rc pfwait 2 0 && [ "$(trace_get "$T" "t['check']")" = ok ] && [ "$waited" = yes ] &&
  [ "$(trace_get "$T" "[r['rail'] for r in t['readmissions']]")" = "['r1']" ] &&
  [ "$(trace_get "$T" "t['op_split'][0][1] > 0")" = True ]; then
  pass "pre-flight wait: /status said waiting while r1 was a hole; the first op ran on both rails"
else
  fail "pre-flight wait (waited: $waited)"
  show pfwait 2
fi

testbed_end
