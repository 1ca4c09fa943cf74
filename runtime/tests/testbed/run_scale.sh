#!/usr/bin/env bash
# Test-bed scale scenario of libnezha (bench/README.md "Runtime at scale, as measured"; needs
# root): N nezha-bench ranks, 4 to a bed host (N/4 hosts, ranks numbered host-major), two rails
# of 50/50 Mbit/s per host. bench/harness/scale_run.py runs the phases (start-up, a 1 KiB loop with
# every rank's sockets/threads/RSS read from /proc, the five collectives at 4 B - 4 MiB with every
# result checked, a rail cut on host 1 mid-loop, the last rank killed mid-loop) and writes their
# raw measurements to OUT_JSON; this script judges correctness (exact results, one agreed
# failover, every survivor failing with the same error naming the killed rank within 1 s);
# bench/run_scale_runtime.py judges the targets.
#
#   [SCALE_JOB_ENV="NEZHA_VAR=VALUE ..."] run_scale.sh NEZHA_BENCH TESTBED_SH RANKS OUT_JSON
#
# SCALE_JOB_ENV: knobs for every rank of every phase (recorded with the measurements).
# Bed name `nzs1`; everything is torn down on exit. Not in `make test` (CI budget): run it
# through `make bench-scale-runtime`, under the heavy lock (64 ranks load both cores).
set -euo pipefail
BENCH=$(realpath "$1")
TESTBED=$(realpath "$2")
RANKS=$3
OUT=$(realpath -m "$4")
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzs1 29900
REPO=$(cd "$(dirname "$(realpath "$0")")/../../.." && pwd)

bed_up $((RANKS / 4)) 2 --rate 50,50
(cd "$REPO" && python3 -m bench.harness.scale_run --bed "$BED" --testbed "$TESTBED" --bench "$BENCH" \
  --ranks "$RANKS" --token "$TOKEN" --port "$PORT" --work "$WORK" --out "$OUT" --job-env "${SCALE_JOB_ENV:-}")

# get EXPR: EXPR evaluated on the run's measurements `r`.
get() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($1)" "$OUT"; }
every_rc() { get "all(c == $2 for c in $1['rc'])"; } # PHASE_EXPR WANT: every rank's exit code

if [ "$(every_rc "r['startup']" 0)" = True ]; then
  pass "N=$RANKS start-up: every rank's first allreduce exact, $(get "round(r['startup']['seconds'], 2)") s"
else
  fail "N=$RANKS start-up: exit codes $(get "r['startup']['rc']")"
  show startup "$RANKS"
fi
if [ "$(every_rc "r['steady']" 0)" = True ] && [ "$(get "r['steady'].get('check')")" = ok ] &&
  [ "$(get "len(r['steady']['usage']) == $RANKS")" = True ]; then
  pass "N=$RANKS 1 KiB loop: exact over $(get "r['steady']['completed']") ops, /proc read on every rank"
else
  fail "N=$RANKS 1 KiB loop: exit codes $(get "r['steady']['rc']"), check $(get "r['steady'].get('check')")"
  show steady "$RANKS"
fi
for op in allreduce allgather reduce_scatter alltoall broadcast; do
  if [ "$(every_rc "r['collectives']['$op']" 0)" = True ] &&
    [ "$(get "len(r['collectives']['$op']['rows']) == 5 and all(x['check'] == 'ok' for x in r['collectives']['$op']['rows'])")" = True ]; then
    pass "N=$RANKS $op 4 B - 4 MiB: every result checked on every rank"
  else
    fail "N=$RANKS $op: exit codes $(get "r['collectives']['$op']['rc']"), $(get "r['collectives']['$op']['error']")"
    show "coll-$op" "$RANKS"
  fi
done
if [ "$(every_rc "r['cut']" 0)" = True ] && [ "$(get "r['cut'].get('check')")" = ok ] &&
  [ "$(get "[f['rail'] for f in r['cut'].get('failovers', [])]")" = "['r1']" ]; then
  pass "N=$RANKS rail cut on host 1: exact over $(get "r['cut']['completed']") ops, one failover of r1," \
    "agreed $(get "round(r['cut']['agreed_s'] * 1e3)") ms after the cut"
else
  fail "N=$RANKS rail cut on host 1: exit codes $(get "r['cut']['rc']"), failovers $(get "r['cut'].get('failovers')")"
  show cut "$RANKS"
fi
# The same error on every survivor: the family "no rail left to finish it on" naming the killed
# rank as gone, with one cause text from "rank(s) VICTIM" on (each line also names the rank that
# prints it and the one that failed the round), within the 1 s the runtime documents for a peer
# gone on every rail (runtime/README.md, NEZHA_PEER_SILENCE_MS).
victim=$((RANKS - 1))
same_error="all('no rail left to finish it on' in e and 'rank(s) $victim ' in e for e in r['kill']['errors'])"
one_cause="len({e[e.find('rank(s) $victim '):].split(' [rails tried')[0] for e in r['kill']['errors'] if 'rank(s) $victim ' in e}) == 1"
in_bound="all(s is not None and s <= 1.0 for s in r['kill']['exit_after_kill_s'])"
if [ "$(get "r['kill']['killed_unix'] is not None and all(r['kill']['rc'][i] == 3 for i in range($victim))")" = True ] &&
  [ "$(get "$same_error")" = True ] && [ "$(get "$one_cause")" = True ] && [ "$(get "$in_bound")" = True ]; then
  pass "N=$RANKS rank $victim killed: every other rank exited 3 naming it within" \
    "$(get "round(max(r['kill']['exit_after_kill_s']), 2)") s: $(get "r['kill']['errors'][0]")"
else
  fail "N=$RANKS rank killed (killed: $(get "r['kill']['killed_unix'] is not None")): exit codes $(get "r['kill']['rc']")," \
    "naming it: $(get "$same_error"), one cause: $(get "$one_cause"), within 1 s: $(get "$in_bound")"
  show kill "$RANKS"
fi
testbed_end
