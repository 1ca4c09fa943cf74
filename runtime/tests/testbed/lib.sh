# Shared by the test-bed scripts (sourced, not run): the set-up every scenario script needs
# (testbed_begin, bed_up, testbed_end) and the helpers that start and judge jobs on the bed. The
# caller sets TESTBED (hack/testbed.sh) and, for nezha-bench jobs, BENCH; ranks are nezha-bench
# processes, one per bed host; logs and exit codes land in $WORK.
# shellcheck shell=bash

log() { echo "${LOG_PREFIX:-testbed}: $*" >&2; }
pass() { passes=$((passes + 1)); log "PASS $*"; }
fail() { failures=$((failures + 1)); log "FAIL $*"; }

# testbed_begin BED [PORT]: a scenario script's set-up. Needs root (the bed is network namespaces).
# Sets BED, PORT (the first rendezvous port: run_job takes the next one per job, so jobs never
# share one; a script that starts no nezha-bench job leaves it out), TOKEN (a fresh job token),
# WORK (logs and exit codes, /tmp/BED-testbed.XXXXXX) and the pass and fail counters; on exit the
# bed goes, and WORK with it unless KEEP=1. A script with more to undo (an aggregator, an extra
# namespace) defines cleanup_extra, which runs first.
testbed_begin() {
  BED=$1
  PORT=${2:-}
  [ "$(id -u)" = 0 ] || { log "needs root (network namespaces)"; exit 1; }
  TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d " \n")
  WORK=$(mktemp -d "/tmp/$BED-testbed.XXXXXX")
  passes=0
  failures=0
  trap testbed_cleanup EXIT
}
testbed_cleanup() {
  if declare -F cleanup_extra >/dev/null; then cleanup_extra || true; fi
  "$TESTBED" down --name "$BED" >/dev/null 2>&1 || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
# bed_up HOSTS RAILS [testbed.sh up flags]: a fresh bed of that shape (a leftover one of the same
# name, from a run that was killed, goes first).
bed_up() {
  local hosts=$1 rails=$2
  shift 2
  "$TESTBED" down --name "$BED" >/dev/null 2>&1 || true
  "$TESTBED" up --name "$BED" --hosts "$hosts" --rails "$rails" "$@" >/dev/null
}
# testbed_end: the tally; the script's exit status (its last command) is 0 iff nothing failed.
testbed_end() {
  log "$passes passed, $failures failed"
  [ "$failures" = 0 ]
}

# Rail faults on one host of the bed, HOST RAIL: a cut (carrier down), its restore, and a black
# hole (HOST RAIL add|delete: the link stays up, every packet on it is dropped). Named *_rail so
# that coreutils' cut stays usable in the scripts.
cut_rail() { "$TESTBED" cut --name "$BED" --host "$1" --rail "$2" >/dev/null; }
restore_rail() { "$TESTBED" restore --name "$BED" --host "$1" --rail "$2" >/dev/null; }
hole_rail() {
  local op=-A
  [ "$3" = delete ] && op=-D
  "$TESTBED" exec --name "$BED" --host "$1" -- iptables "$op" INPUT -i "r$2" -j DROP
  "$TESTBED" exec --name "$BED" --host "$1" -- iptables "$op" OUTPUT -o "r$2" -j DROP
}
addr() { "$TESTBED" addr --name "$BED" --host "$1" --rail "$2"; }

# rdma_fixtures HOSTS RAILS: the fixture sysfs tree $RDMA_SYSFS.H of each host H for the
# libibverbs test double: device nzdbl_rK behind interface rK, port 1, RoCE v2 GID 0 =
# ::ffff:<the rail's address>, the layout discovery.h documents for real HCAs.
rdma_fixtures() {
  local h k root dev port a b c d
  for ((h = 0; h < $1; h++)); do
    for ((k = 0; k < $2; k++)); do
      root=$RDMA_SYSFS.$h dev=nzdbl_r$k
      port=$root/class/infiniband/$dev/ports/1
      mkdir -p "$root/class/net/r$k/device/infiniband/$dev" "$port/gids" "$port/gid_attrs/ndevs" \
        "$port/gid_attrs/types"
      IFS=. read -r a b c d <<<"$(addr "$h" "$k")"
      printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$a" "$b" "$c" "$d" >"$port/gids/0"
      echo Ethernet >"$port/link_layer"
      echo "r$k" >"$port/gid_attrs/ndevs/0"
      echo "RoCE v2" >"$port/gid_attrs/types/0"
    done
  done
}

# run_job NAME HOSTS RAILS [VAR=VALUE ...] -- BENCH_ARGS...
# Starts one nezha-bench per host, waits for all; exit codes land in $WORK/NAME.rc.I, output in
# $WORK/NAME.log.I. Returns 0 iff every rank exited 0.
run_job() {
  local name=$1 hosts=$2 rails=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  # TRANSPORTS="rdma tcp": rail k's transport (default tcp). RDMA_SYSFS: rank i gets the
  # libibverbs test double ($IBV_DOUBLE) and the fixture tree $RDMA_SYSFS.i (run_rdma.sh).
  local spec="" k i transports=() hostenv=()
  read -r -a transports <<<"${TRANSPORTS:-}"
  for ((k = 0; k < rails; k++)); do spec+="${spec:+,}r$k=r$k:${transports[$k]:-tcp}"; done
  PORT=$((PORT + 1))
  local rdv
  rdv="$(addr 0 0):$PORT"
  local pids=()
  for ((i = 0; i < hosts; i++)); do
    [ -z "${RDMA_SYSFS:-}" ] || hostenv=(NEZHA_RDMA_SYSFS_ROOT="$RDMA_SYSFS.$i" LD_LIBRARY_PATH="$IBV_DOUBLE")
    "$TESTBED" exec --name "$BED" --host "$i" -- env NEZHA_RAILS="$spec" NEZHA_RANK="$i" \
      NEZHA_WORLD_SIZE="$hosts" NEZHA_RENDEZVOUS="$rdv" NEZHA_JOB_TOKEN="$TOKEN" \
      NEZHA_RENDEZVOUS_TIMEOUT_MS=20000 "${hostenv[@]}" "${envs[@]}" "$BENCH" "$@" \
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

# show_events TRACE T0: rank 0's failover decisions, times relative to T0 (on failure).
show_events() {
  python3 - "$1" "$2" <<'PY' >&2 || true
import json, sys
t = json.load(open(sys.argv[1])); t0 = float(sys.argv[2])
for kind in ("failovers", "rejected_readmissions", "readmissions", "drains"):
    for e in t.get(kind, []):
        print(f"  [{kind}] op {e['op']} rail {e['rail']} reason {e.get('reason')} "
              f"ranks {e.get('ranks')} t{e['t_unix'] - t0:+.2f}s {e.get('local_error', '')[:160]}")
print(f"  check {t['check']}, {t['completed']} ops, error {t['error']}, "
      f"rail states {t.get('rail_states')}, last split {(t.get('op_split') or [None])[-1]}")
PY
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


# ---- loop jobs (failover): every op checked on every rank, rank 0 writes a trace ----------------
# `trace_get FILE EXPR` evaluates EXPR on the trace `t`.
trace_get() { python3 -c "import json,sys; t=json.load(open(sys.argv[1])); print($2)" "$1"; }
# loop_job NAME HOSTS RAILS SECONDS [VAR=VALUE ...] -- runs the job (callers background it).
loop_job() {
  local name=$1 hosts=$2 rails=$3 secs=$4
  shift 4
  rm -f "$WORK/$name.ready"
  run_job "$name" "$hosts" "$rails" NEZHA_COLD_THRESHOLD=0 NEZHA_MIN_SLICE_BYTES=0 \
    NEZHA_IO_TIMEOUT_MS=10000 "$@" -- --quiet --max-bytes 4M --loop-seconds "$secs" \
    --trace "$WORK/$name.trace.json" --ready-file "$WORK/$name.ready"
}
# until_exists FILE PID WHAT: waits until FILE exists. Bounded (30 s), and gives up early if PID
# (the job that makes FILE) has ended; never fails the script itself: the scenario's checks do.
until_exists() {
  local i
  for ((i = 0; i < 300; i++)); do
    [ -e "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  log "$3 never reported running"
}
# until_running NAME PID: waits until loop job NAME is moving data (rank 0 creates its ready file
# after its first 20 operations), so a fault lands in a running job however long the start-up
# took; a fixed sleep raced slow rendezvous (a gray rail shaped before the first operation is
# measured slow and simply given no share: nothing to fail over).
until_running() { until_exists "$WORK/$1.ready" "$2" "loop job $1"; }
all_rc() { # name hosts want: every rank's exit code equals want
  local i
  for ((i = 0; i < $2; i++)); do [ "$(cat "$WORK/$1.rc.$i")" = "$3" ] || return 1; done
}
# The longest op that ended after the first failover, in ms (includes the replay and the slower
# pace on the surviving rails; the bench reports the stall proper).
longest_op_ms() {
  trace_get "$1" "round(max([d for (e, d) in t['ops'] if e >= t['failovers'][0]['t_unix']] or [0]) / 1e3)"
}
