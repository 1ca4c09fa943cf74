# shellcheck shell=bash
# Starting and stopping the local cluster's processes, always by the PID recorded at start and
# only after checking that PID still runs the binary we started (PIDs get reused).
# Needs common.sh and cluster-env.sh.

# cluster_start NAME BINARY ARGS...: run in its own session (so a Ctrl-C of the caller does not
# take the cluster down), log to $C_LOGS/NAME.log, record the PID.
cluster_start() {
  local name=$1
  shift
  mkdir -p "$C_LOGS" "$C_PIDS"
  setsid "$@" >"$C_LOGS/$name.log" 2>&1 </dev/null &
  local pid=$! i
  echo "$pid" >"$C_PIDS/$name.pid"
  echo "$1" >"$C_PIDS/$name.exe"
  # Until the forked shell has exec'd the binary, /proc shows the shell's command line and
  # cluster_pid would call the component dead: wait for the exec (or the exit).
  for ((i = 0; i < 250; i++)); do
    cluster_pid "$name" >/dev/null && return 0
    proc_running "$pid" || return 0 # died at once; the caller's checks report it with the log
    sleep 0.02
  done
}

# cluster_pid NAME: the recorded PID if that process still runs the recorded binary.
cluster_pid() {
  local name=$1 pid exe
  [ -f "$C_PIDS/$name.pid" ] || return 1
  pid=$(cat "$C_PIDS/$name.pid")
  exe=$(cat "$C_PIDS/$name.exe" 2>/dev/null) || return 1
  proc_running "$pid" || return 1
  [ "$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1)" = "$exe" ] || return 1
  echo "$pid"
}

# proc_running PID: the process exists and is not a zombie. PID 1 on this kind of VM reaps
# orphans only about once a second, so an exited daemon lingers as a zombie for a while.
proc_running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# cluster_stop NAME... : SIGTERM all at once, wait up to $CLUSTER_STOP_GRACE seconds for all,
# then SIGKILL what is left. Stopping together keeps `down` short: each component takes a
# second or two to shut down.
cluster_stop() {
  local name pid i pids=() left
  for name in "$@"; do
    if pid=$(cluster_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$name:$pid")
    fi
  done
  for ((i = 0; i < CLUSTER_STOP_GRACE * 10; i++)); do
    left=0
    for pid in "${pids[@]}"; do proc_running "${pid#*:}" && left=1; done
    [ "$left" = 1 ] || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if proc_running "${pid#*:}"; then
      log "${pid%%:*} (pid ${pid#*:}) ignored SIGTERM for ${CLUSTER_STOP_GRACE}s; killing it"
      kill -KILL "${pid#*:}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do rm -f "$C_PIDS/$name.pid" "$C_PIDS/$name.exe"; done
}

# cluster_shim_pids: containerd shims serving our containerd (found by the -address argument
# that carries our socket path; the system containerd's shims never match).
cluster_shim_pids() {
  local f pid
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    # Processes come and go while we scan: a vanished /proc entry is not an error.
    if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q "^[^ ]*containerd-shim[^ ]* .*-address $C_CONTAINERD_SOCK "; then
      echo "$pid"
    fi
  done
}

# cluster_wait TIMEOUT_SECONDS COMMAND...: poll COMMAND until it succeeds; false on timeout.
cluster_wait() {
  local timeout=$1 i
  shift
  for ((i = 0; i < timeout * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

# cluster_check_alive NAME: false, with the log tail on stderr, if the component is not running.
cluster_check_alive() {
  cluster_pid "$1" >/dev/null && return 0
  log "$1 is not running; last lines of $C_LOGS/$1.log:"
  tail -n 20 "$C_LOGS/$1.log" >&2 || true
  return 1
}

# cluster_await NAME TIMEOUT_SECONDS WHAT COMMAND...: poll COMMAND until it succeeds; fail at
# once (with the log tail) if component NAME dies meanwhile, rather than waiting out the timeout.
cluster_await() {
  local name=$1 timeout=$2 what=$3 i
  shift 3
  for ((i = 0; i < timeout * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    cluster_check_alive "$name" || fail "up: $name exited before $what"
    sleep 0.2
  done
  cluster_check_alive "$name" || true
  fail "up: $what: not after ${timeout}s (log: $C_LOGS/$name.log)"
}
