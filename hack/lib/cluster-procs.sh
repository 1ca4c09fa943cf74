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
  echo "$!" >"$C_PIDS/$name.pid"
  echo "$1" >"$C_PIDS/$name.exe"
}

# cluster_pid NAME: the recorded PID if that process still runs the recorded binary.
cluster_pid() {
  local name=$1 pid exe
  [ -f "$C_PIDS/$name.pid" ] || return 1
  pid=$(cat "$C_PIDS/$name.pid")
  exe=$(cat "$C_PIDS/$name.exe" 2>/dev/null) || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1)" = "$exe" ] || return 1
  echo "$pid"
}

# cluster_stop NAME [GRACE_SECONDS]: SIGTERM, wait, then SIGKILL.
cluster_stop() {
  local name=$1 grace=${2:-10} pid i
  if pid=$(cluster_pid "$name"); then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      log "$name (pid $pid) ignored SIGTERM for ${grace}s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
    fi
  fi
  rm -f "$C_PIDS/$name.pid" "$C_PIDS/$name.exe"
}

# cluster_shim_pids: containerd shims serving our containerd (found by the -address argument
# that carries our socket path; the system containerd's shims never match).
cluster_shim_pids() {
  local f pid
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    if tr '\0' ' ' <"$f" 2>/dev/null | grep -q "^[^ ]*containerd-shim[^ ]* .*-address $C_CONTAINERD_SOCK "; then
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

# cluster_check_alive NAME: fail with the log tail if a component died during start.
cluster_check_alive() {
  cluster_pid "$1" >/dev/null && return 0
  log "$1 exited; last lines of $C_LOGS/$1.log:"
  tail -n 20 "$C_LOGS/$1.log" >&2 || true
  return 1
}
