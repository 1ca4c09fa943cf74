#!/usr/bin/env bash
# The NCCL net plugin on the rail test bed (needs root): nezha-nccl-harness processes, one per
# namespace, load libnccl-net-nezha.so and drive it as NCCL's proxy does. Every scenario checks
# every byte (p2p) or every element (ring allreduce) on every rank.
#
#   run_nccl.sh PLUGIN_SO HARNESS TESTBED_SH [IBVERBS_DOUBLE_DIR]
#
# With IBVERBS_DOUBLE_DIR (builds with the verbs transport), the last scenario runs a tcp rail
# beside an rdma rail: the libibverbs test double (tests/doubles/ibverbs) on LD_LIBRARY_PATH and
# a fixture sysfs tree per host (lib.sh rdma_fixtures), as run_rdma.sh does.
#
# Bed name `nzn1` (4 hosts x 3 rails, unshaped); torn down on exit.
set -euo pipefail
PLUGIN=$(realpath "$1")
HARNESS=$(realpath "$2")
TESTBED=$(realpath "$3")
IBV_DOUBLE=${4:+$(realpath "$4")}
LOG_PREFIX=nccl-testbed
# shellcheck source=runtime/tests/testbed/lib.sh
source "$(dirname "$(realpath "$0")")/lib.sh"
testbed_begin nzn1

# Every rail connection proves the job's token (docs/security.md "NCCL plugin"); one per run.
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))')

# run NAME HOSTS RAILS [VAR=VALUE ...] -- HARNESS_ARGS...: one harness per host; 0 iff all exit 0.
run() {
  local name=$1 hosts=$2 rails=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  # TRANSPORTS="tcp rdma": rail k's transport (default tcp); RDMA_SYSFS: as lib.sh's run_job.
  local spec="" k i pids=() transports=() hostenv=()
  read -r -a transports <<<"${TRANSPORTS:-}"
  for ((k = 0; k < rails; k++)); do spec+="${spec:+,}r$k=r$k:${transports[$k]:-tcp}"; done
  mkdir -p "$WORK/$name"
  for ((i = 0; i < hosts; i++)); do
    [ -z "${RDMA_SYSFS:-}" ] || hostenv=(NEZHA_RDMA_SYSFS_ROOT="$RDMA_SYSFS.$i" LD_LIBRARY_PATH="$IBV_DOUBLE")
    "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS="$spec" NEZHA_JOB_TOKEN="$TOKEN" \
      "${hostenv[@]}" "${envs[@]}" \
      "$HARNESS" --plugin "$PLUGIN" --rank "$i" --world "$hosts" --dir "$WORK/$name" "$@" \
      >"$WORK/$name.out.$i" 2>"$WORK/$name.err.$i" &
    pids+=($!)
  done
  local ok=0
  for ((i = 0; i < hosts; i++)); do wait "${pids[$i]}" || ok=1; done
  return $ok
}
show() { # name hosts
  local i
  for ((i = 0; i < $2; i++)); do
    sed "s/^/  [$1 rank $i out] /" "$WORK/$1.out.$i" >&2
    tail -20 "$WORK/$1.err.$i" | sed "s/^/  [$1 rank $i err] /" >&2
  done
}
# get NAME RANK EXPR: a Python expression over j = that rank's JSON output.
get() {
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" \
    "$WORK/$1.out.$2" "$3" 2>/dev/null || echo "?"
}
all_ok() { # name hosts
  local i
  for ((i = 0; i < $2; i++)); do [ "$(get "$1" "$i" "j['check']")" = ok ] || return 1; done
}
# rail_stat NAME RANK RAIL FIELD: the plugin's counter on that rank.
rail_stat() { get "$1" "$2" "j['stats']['rails'][$3]['$4']"; }

METRICSLINT=$WORK/metricslint
(cd "$(dirname "$(realpath "$0")")/../../.." && go build -o "$METRICSLINT" ./hack/tools/metricslint)

bed_up 4 3

# 1. The contract NCCL relies on, per ABI version: tags, grouped receives (n up to 8), receives
# larger than the send, 0-byte and multi-chunk messages, many requests in flight, every byte.
for v in 12 11 8; do
  if run p2p$v 3 3 NEZHA_MIN_SLICE_BYTES=64K -- --mode p2p --version "$v" --iters 120 --bytes 1500000 &&
    all_ok p2p$v 3; then
    pass "p2p over ABI v$v, 3 ranks x 3 rails: $(get p2p$v 0 "j['groups']") groups, $(get p2p$v 0 "j['bytes_checked']") bytes checked on rank 0"
  else
    fail "p2p over ABI v$v"
    show p2p$v 3
  fi
done

# 2. Ring allreduce on top of the plugin, the way NCCL runs one: 2-4 ranks x 1-3 rails.
for shape in "2 1" "3 2" "4 3" "2 3"; do
  read -r hosts rails <<<"$shape"
  name=ring${hosts}x$rails
  if run "$name" "$hosts" "$rails" -- --mode ring --bytes 3000000 --iters 4 && all_ok "$name" "$hosts"; then
    used=""
    for ((k = 0; k < rails; k++)); do used+=" r$k=$(rail_stat "$name" 0 "$k" bytes_sent)"; done
    # Every rail must have carried data: a rail left idle is a striping bug.
    idle=0
    for ((k = 0; k < rails; k++)); do [ "$(rail_stat "$name" 0 "$k" bytes_sent)" -gt 0 ] || idle=1; done
    if [ $idle = 0 ]; then
      pass "ring allreduce $hosts ranks x $rails rails exact; rank 0 bytes per rail:$used"
    else
      fail "ring allreduce $hosts x $rails left a rail idle:$used"
    fi
  else
    fail "ring allreduce $hosts ranks x $rails rails"
    show "$name" "$hosts"
  fi
done

# until_ring_running NAME PID: until a --seconds ring loop's rank 0 has written NAME/running after
# its first operations (lib.sh's until_exists).
until_ring_running() { until_exists "$WORK/$1/running" "$2" "ring loop $1"; }

# 3. Failures in the middle of transfers. A loop of 8 MiB allreduces runs for SECONDS; a fault
# starts once the loop is moving data and lasts 2 s. Every op must be exact, the faulty rail must
# fail over on the rank that sends over it, and it must come back and carry data again after the fault ends.
# With EXPECT, host 1's last failure must contain it (how it learned of the fault).
fault_run() { # name fault-on fault-off [expect]
  local name=$1 on=$2 off=$3 expect=${4:-}
  run "$name" 2 2 NEZHA_WATCHDOG_MS=500 -- --mode ring --bytes 8000000 --iters 1 --seconds 8 &
  local job=$!
  until_ring_running "$name" "$job" # the fault must land while transfers run
  $on
  sleep 2
  $off
  wait $job || true
  if ! all_ok "$name" 2; then
    fail "$name: a result was wrong or a rank failed"
    show "$name" 2
    return
  fi
  # Rank 0 sends to rank 1 over r1; host 1's r1 is the faulty one.
  local f r ops
  f=$(rail_stat "$name" 0 1 failures)
  r=$(rail_stat "$name" 0 1 readmissions)
  ops=$(get "$name" 0 "j['ops']")
  if [ -n "$expect" ] && ! get "$name" 1 "j['stats']['last_failure']" | grep -qF "$expect"; then
    fail "$name: host 1's last failure is '$(get "$name" 1 "j['stats']['last_failure'][:160]")', want '$expect'"
  elif [ "$f" -ge 1 ] && [ "$r" -ge 1 ]; then
    pass "$name: $ops exact 8 MB allreduces; r1 failed $f time(s), came back $r time(s); worst op $(get "$name" 0 "round(j['max_op_s'], 2)") s, median $(get "$name" 0 "round(j['median_op_s'], 3)") s; last failure: $(get "$name" 0 "j['stats']['last_failure'][:120]")"
  else
    fail "$name: r1 failures=$f readmissions=$r (want >= 1 each)"
    show "$name" 2
  fi
}
cut_on() { "$TESTBED" cut --name "$BED" --host 1 --rail 1 >/dev/null; }
cut_off() { "$TESTBED" restore --name "$BED" --host 1 --rail 1 >/dev/null; }
hole_on() {
  "$TESTBED" exec --name "$BED" --host 1 -- iptables -I INPUT -i r1 -j DROP
  "$TESTBED" exec --name "$BED" --host 1 -- iptables -I OUTPUT -o r1 -j DROP
}
hole_off() {
  "$TESTBED" exec --name "$BED" --host 1 -- iptables -D INPUT -i r1 -j DROP
  "$TESTBED" exec --name "$BED" --host 1 -- iptables -D OUTPUT -o r1 -j DROP
}
# A cut takes the carrier of host 1's r1 away: its plugin's link watch takes the rail out at once.
fault_run cut cut_on cut_off "link of r1 went down"
fault_run blackhole hole_on hole_off

# A gray rail: host 1's r1 drops to 20 Mbit/s (from several Gbit/s here) for 2 s of an 8 MB
# allreduce loop. Results stay exact; the rail is measured slow and carries little while it is.
run gray 2 2 -- --mode ring --bytes 8000000 --iters 1 --seconds 6 &
job=$!
until_ring_running gray "$job"
"$TESTBED" shape --name "$BED" --host 1 --rail 1 --rate 20 >/dev/null
sleep 2
"$TESTBED" shape --name "$BED" --host 1 --rail 1 --rate 0 >/dev/null
wait $job || true
if all_ok gray 2; then
  pass "gray rail (20 Mbit/s for 2 s): $(get gray 1 "j['ops']") exact 8 MB allreduces; rank 1's worst op $(get gray 1 "round(j['max_op_s'], 2)") s, median $(get gray 1 "round(j['median_op_s'], 3)") s; r1 failures $(rail_stat gray 1 1 failures)"
else
  fail "gray rail: a result was wrong or a rank failed"
  show gray 2
fi

# 4. Every rail gone: a clear error on the sending side, never a hang or a wrong result.
run alldown 2 1 NEZHA_WATCHDOG_MS=300 NEZHA_PROGRESS_FLOOR_MS=300 -- --mode ring --bytes 8000000 --iters 1 --seconds 8 --timeout-ms 20000 &
job=$!
until_ring_running alldown "$job"
"$TESTBED" exec --name "$BED" --host 1 -- iptables -I INPUT -i r0 -j DROP
"$TESTBED" exec --name "$BED" --host 1 -- iptables -I OUTPUT -o r0 -j DROP
wait $job || true
"$TESTBED" exec --name "$BED" --host 1 -- iptables -D INPUT -i r0 -j DROP
"$TESTBED" exec --name "$BED" --host 1 -- iptables -D OUTPUT -o r0 -j DROP
# The engine's words for it (failover/ "no rail left"): the operation names the last rail tried.
if [ "$(grep -l "no rail left to finish it on" "$WORK"/alldown.err.* | wc -l)" = 2 ]; then
  pass "all rails black-holed, both ranks: '$(grep -ho "no rail left to finish it on[^\"]*" "$WORK"/alldown.err.* | head -1 | cut -c1-160)'"
else
  fail "all rails down: no clear error"
  show alldown 2
fi

# 5. The plugin's control endpoint (NEZHA_NCCL_CONTROL_ADDR) while traffic flows: /metrics
# passes promtool's checks and counts bytes per rail, a wrong method is refused and an unsigned
# drain is refused (signed drain/restore: tests/nccl/plugin_control_test.cc). The loop runs until
# the checks are done (--stop-file; 60 s at most), so they never race its end on a slow host.
run endpoint 2 2 NEZHA_NCCL_CONTROL_ADDR=127.0.0.1:9434 NEZHA_JOB_NAME=bed -- \
  --mode ring --bytes 4000000 --iters 1 --seconds 60 --stop-file stop &
job=$!
until_ring_running endpoint "$job"
metrics=""
for ((t = 0; t < 100; t++)); do # until the endpoint answers with traffic counted (bounded)
  metrics=$("$TESTBED" exec --name "$BED" --host 0 -- curl -sf http://127.0.0.1:9434/metrics || true)
  grep -q 'nezha_runtime_rail_bytes_total{job="bed",local_rank="0",rail="r1"} [1-9]' <<<"$metrics" && break
  sleep 0.1
done
post=$("$TESTBED" exec --name "$BED" --host 0 -- curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:9434/status || true)
drain=$("$TESTBED" exec --name "$BED" --host 0 -- curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:9434/rails/r1/drain || true)
touch "$WORK/endpoint/stop"
wait $job || true
if grep -q 'rail="r1"} [1-9]' <<<"$metrics" && "$METRICSLINT" <<<"$metrics" && [ "$post" = 405 ] &&
  [ "$drain" = 401 ] && all_ok endpoint 2; then
  pass "endpoint: /metrics lints clean and counts both rails; POST /status 405, unsigned drain 401"
else
  fail "endpoint: metrics '$(head -c 300 <<<"$metrics")', POST $post, unsigned drain $drain"
  show endpoint 2
fi

# 6. A tcp rail (r0) beside an rdma rail (r1, the libibverbs test double) in every connection:
# p2p and ring allreduce exact with both rails carrying data, and a cut of the rdma rail in the
# middle of an allreduce loop (its queue pairs fail, it is rebuilt and comes back).
if [ -n "$IBV_DOUBLE" ]; then
  [ -e "$IBV_DOUBLE/libibverbs.so.1" ] || { fail "no libibverbs double in $IBV_DOUBLE"; exit 1; }
  RDMA_SYSFS=$WORK/sysfs
  rdma_fixtures 4 3
  export TRANSPORTS="tcp rdma"
  if run mixed_p2p 2 2 NEZHA_MIN_SLICE_BYTES=64K -- --mode p2p --version 12 --iters 60 --bytes 1500000 &&
    all_ok mixed_p2p 2; then
    pass "mixed tcp + rdma rails, p2p over ABI v12: $(get mixed_p2p 0 "j['bytes_checked']") bytes checked on rank 0"
  else
    fail "mixed tcp + rdma rails, p2p"
    show mixed_p2p 2
  fi
  # Both rails must carry data here, so the split is held equal (the rails' expected speeds, no
  # probe, no tuning) and every message above 64K is split: under load the double can measure
  # slow enough that a learned split leaves it idle in one direction, which is the scheduler's
  # right answer, not the striping bug this looks for.
  if TRANSPORTS="tcp@1000 rdma@1000" run mixed_ring 2 2 NEZHA_PROBE_BYTES=0 NEZHA_TUNE_INTERVAL=1000000 \
    NEZHA_COLD_THRESHOLD=64K NEZHA_MIN_SLICE_BYTES=64K -- --mode ring --bytes 3000000 --iters 4 &&
    all_ok mixed_ring 2 &&
    [ "$(rail_stat mixed_ring 0 0 bytes_sent)" -gt 0 ] && [ "$(rail_stat mixed_ring 0 1 bytes_sent)" -gt 0 ]; then
    pass "mixed tcp + rdma rails, ring allreduce exact; rank 0 bytes r0 (tcp) $(rail_stat mixed_ring 0 0 bytes_sent), r1 (rdma) $(rail_stat mixed_ring 0 1 bytes_sent)"
  else
    fail "mixed tcp + rdma rails, ring allreduce (or a rail left idle)"
    show mixed_ring 2
  fi
  fault_run mixed_cut cut_on cut_off
  unset TRANSPORTS RDMA_SYSFS
else
  log "SKIP mixed tcp + rdma rails: no IBVERBS_DOUBLE_DIR (a build without the verbs transport)"
fi

testbed_end
