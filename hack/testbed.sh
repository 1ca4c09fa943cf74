#!/usr/bin/env bash
# Multi-rail test bed: N hosts x K rails built from network namespaces, for tests and benchmarks
# that need real kernel networking between "hosts" with several NICs.
#
#   hack/testbed.sh up      --name NAME --hosts N --rails K [--rate R0,R1,...] [--same-subnet] [--mptcp]
#                           [--tcp-cc ALGO]
#   hack/testbed.sh down    --name NAME             idempotent; fine if nothing exists
#   hack/testbed.sh shape   --name NAME --rail K --rate MBIT [--host I]   rate 0 = unshaped
#   hack/testbed.sh cut     --name NAME --host I --rail K
#   hack/testbed.sh restore --name NAME --host I --rail K
#   hack/testbed.sh exec    --name NAME --host I -- CMD ARGS...
#   hack/testbed.sh addr    --name NAME --host I --rail K   prints the host's rail IPv4 (no prefix)
#   hack/testbed.sh status  --name NAME             hosts, rails, addresses, link state, qdisc rate
#
# Topology (nothing is ever added to the root namespace):
#   host I   = netns NAME-hI, rail interfaces r0..rK-1 plus lo
#   switch   = netns NAME-sw holding one bridge br-rK per rail; host I's rail K plugs into it
#              through the veth pair (rK in NAME-hI) <-> (hIrK in NAME-sw)
#   addresses: rail K = 10.(100+K).0.0/24, host I = .(10+I)
#              --same-subnet: every rail in 10.100.0.0/16, rail K host I = 10.100.K.(10+I)
#   shaping:   TBF on the host-side egress of rK (rates in Mbit/s)
#
# --same-subnet also sets arp_ignore=1 / arp_announce=2 / rp_filter=0 in each host, so a host
# answers ARP on a rail only for that rail's own address. Traffic routed out of the wrong rail
# then fails instead of silently crossing over, which is what policy-routing tests need to see.
#
# --mptcp: every host announces its rails >= 1 (signal endpoints carrying a port) and accepts
# announcements, so `mptcpize run CMD` spreads one connection over all rails, whether the server
# listens on the wildcard address or only on its rail-0 address (see MPTCP_JOIN_PORT).
#
# --tcp-cc: every host's TCP congestion control (net.ipv4.tcp_congestion_control in its netns).
# Without it a host namespace inherits the machine's default, which is a hidden variable in every
# measurement: BBR (v1), for one, drains its queue to 4 packets for ~200 ms every 10 s (PROBE_RTT),
# which shows as one slow operation every 10 s of a job, Gloo's and Nezha's alike. A namespace may
# only pick an algorithm in net.ipv4.tcp_allowed_congestion_control (the kernel's rule).
#
# `cut` takes the switch port down (carrier loss, like a pulled cable): the host keeps its
# addresses, routes, rules and qdisc, so `restore` brings back exactly the earlier state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PROG=testbed.sh
# shellcheck source=hack/lib/common.sh
source "$here/lib/common.sh"

MAX_HOSTS=64 # host address .(10+I) and the switch-side name hIrK stay short
MAX_RAILS=8
# TBF bucket: ~2 ms of traffic, never below 128 KiB so a 64 KiB GSO packet always fits
# (smaller buckets make throughput collapse).
TBF_BURST_MIN_BYTES=131072
TBF_LATENCY=20ms
# Port the kernel listens on for MP_JOINs at each announced rail address (--mptcp). A port-less
# `signal` endpoint makes the peer send its MP_JOIN to the application's own port on the announced
# address; an application bound to its rail-0 address (Gloo, most MPI/NCCL-style stores) has no
# socket there, so every join is refused (peer MPJoinSynTx > 0, our MPJoinSynRx = 0) and the
# connection silently stays on rail 0. `signal port P` makes the kernel open its own listener on
# addr:P and announce that port, so joins never depend on how the application bound. Applications
# on the bed must not use this port on rail addresses >= 1.
MPTCP_JOIN_PORT=7999

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---- argument parsing -------------------------------------------------------------------------
cmd=${1:-}
[ -n "$cmd" ] || usage
shift
name="" hosts="" rails="" rates="" host="" rail="" same_subnet=0 mptcp=0 tcp_cc=""
exec_argv=()
given=() # flags seen, so each subcommand can reject the ones it does not take
need_value() { [ $# -ge 2 ] || die "$cmd: $1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name | --hosts | --rails | --rate | --host | --rail | --tcp-cc)
      need_value "$@"
      given+=("$1")
      case "$1" in
        --name) name=$2 ;;
        --hosts) hosts=$2 ;;
        --rails) rails=$2 ;;
        --rate) rates=$2 ;;
        --host) host=$2 ;;
        --rail) rail=$2 ;;
        --tcp-cc) tcp_cc=$2 ;;
      esac
      shift 2
      ;;
    --same-subnet) given+=("$1"); same_subnet=1; shift ;;
    --mptcp) given+=("$1"); mptcp=1; shift ;;
    --)
      given+=("$1")
      shift
      exec_argv=("$@")
      break
      ;;
    -h | --help) usage ;;
    *) die "$cmd: unknown argument '$1'" ;;
  esac
done

# check_flags ALLOWED...: reject flags this subcommand does not take rather than ignore them.
check_flags() {
  local allowed=" --name $* " f
  for f in "${given[@]}"; do
    [[ $allowed == *" $f "* ]] || die "$cmd: $f is not accepted here"
  done
}

validate_name() {
  [ -n "$name" ] || die "$cmd: --name is required"
  [[ $name =~ ^[a-z0-9]{1,8}$ ]] || die "--name: want 1-8 characters of [a-z0-9], got '$name'"
}

host_ns() { echo "$name-h$1"; }
switch_ns() { echo "$name-sw"; }
ns_exists() { [ -e "/run/netns/$1" ]; }

rail_addr() { # host rail -> address without prefix
  if [ "$same_subnet" = 1 ]; then echo "10.100.$2.$((10 + $1))"; else echo "10.$((100 + $2)).0.$((10 + $1))"; fi
}
rail_prefix() { if [ "$same_subnet" = 1 ]; then echo 16; else echo 24; fi; }

# Host and rail counts of an existing test bed, read back from the kernel (no state file that
# could go stale).
discover() {
  ns_exists "$(switch_ns)" || fail "$cmd: no test bed named '$name' (run: $PROG up --name $name ...)"
  n_hosts=0
  while ns_exists "$(host_ns "$n_hosts")"; do n_hosts=$((n_hosts + 1)); done
  n_rails=0
  while ip -n "$(switch_ns)" link show "br-r$n_rails" >/dev/null 2>&1; do n_rails=$((n_rails + 1)); done
  # Same-subnet mode is recognisable by host 0's rail 0 address.
  same_subnet=0
  if ip -n "$(host_ns 0)" -4 -o addr show dev r0 2>/dev/null | grep -q ' 10\.100\.0\.10/16'; then same_subnet=1; fi
}

validate_host() { # needs discover
  [ -n "$host" ] || die "$cmd: --host is required"
  uint_in_range --host "$host" 0 $((n_hosts - 1))
  host=$((10#$host))
}
validate_rail() { # needs discover
  [ -n "$rail" ] || die "$cmd: --rail is required"
  uint_in_range --rail "$rail" 0 $((n_rails - 1))
  rail=$((10#$rail))
}

# ---- shaping ----------------------------------------------------------------------------------
# set_rate HOST RAIL MBIT: TBF on the host-side egress of rail RAIL; 0 removes shaping.
set_rate() {
  local ns dev=r$2 mbit=$3
  ns=$(host_ns "$1")
  if [ "$mbit" -eq 0 ]; then
    # Deleting a root qdisc that is already the default fails; that is the state we want.
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    return 0
  fi
  local burst=$((mbit * 250)) # 2 ms of traffic in bytes: mbit * 1e6 / 8 * 0.002
  [ "$burst" -ge "$TBF_BURST_MIN_BYTES" ] || burst=$TBF_BURST_MIN_BYTES
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${mbit}mbit" burst "$burst" latency "$TBF_LATENCY"
}

# ---- subcommands ------------------------------------------------------------------------------
up_failed() {
  [ "$1" -eq 0 ] && return 0
  log "up failed; removing partial test bed $name"
  teardown
}

cmd_up() {
  check_flags --hosts --rails --rate --same-subnet --mptcp --tcp-cc
  validate_name
  [ -n "$hosts" ] || die "up: --hosts is required"
  [ -n "$rails" ] || die "up: --rails is required"
  uint_in_range --hosts "$hosts" 1 "$MAX_HOSTS"
  uint_in_range --rails "$rails" 1 "$MAX_RAILS"
  hosts=$((10#$hosts)) rails=$((10#$rails))
  local rate_list=()
  if [ -n "$rates" ]; then
    IFS=, read -r -a rate_list <<<"$rates"
    [ "${#rate_list[@]}" -eq "$rails" ] ||
      die "--rate: want $rails comma-separated Mbit/s values (one per rail), got '$rates'"
    local r
    for r in "${rate_list[@]}"; do
      is_uint "$r" || die "--rate: want integer Mbit/s values (0 = unshaped), got '$r' in '$rates'"
    done
  fi
  if [ -n "$tcp_cc" ]; then
    [[ $tcp_cc =~ ^[a-z0-9_]{1,15}$ ]] || die "--tcp-cc: want a congestion control name like reno or bbr, got '$tcp_cc'"
    local allowed
    allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null || true)
    [[ " $allowed " == *" $tcp_cc "* ]] ||
      die "--tcp-cc: '$tcp_cc' is not in net.ipv4.tcp_allowed_congestion_control ($allowed); a network namespace may only use those"
  fi
  require_root "$PROG up"
  require_cmd ip tc
  local existing
  existing=$(ip netns list | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$" || true)
  [ -z "$existing" ] || fail "up: test bed '$name' already exists ($(echo "$existing" | tr '\n' ' ')); run: $PROG down --name $name"

  # A half-built test bed is worse than none: tear it down if any step fails.
  trap 'up_failed $?' EXIT

  local sw i k ns
  sw=$(switch_ns)
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  for ((k = 0; k < rails; k++)); do
    ip -n "$sw" link add "br-r$k" type bridge stp_state 0 forward_delay 0
    ip -n "$sw" link set "br-r$k" up
  done
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    [ -z "$tcp_cc" ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.tcp_congestion_control=$tcp_cc"
    if [ "$same_subnet" = 1 ]; then
      ip netns exec "$ns" sysctl -q -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    fi
    for ((k = 0; k < rails; k++)); do
      ip link add "r$k" netns "$ns" type veth peer name "h${i}r$k" netns "$sw"
      ip -n "$sw" link set "h${i}r$k" master "br-r$k"
      ip -n "$sw" link set "h${i}r$k" up
      [ "$same_subnet" = 0 ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.conf.r$k.rp_filter=0"
      ip -n "$ns" addr add "$(rail_addr "$i" "$k")/$(rail_prefix)" dev "r$k"
      ip -n "$ns" link set "r$k" up
      if [ "${#rate_list[@]}" -gt 0 ]; then set_rate "$i" "$k" "$((10#${rate_list[$k]}))"; fi
    done
    if [ "$mptcp" = 1 ]; then
      # Each host announces its extra rails (signal endpoints, with the kernel's own join listener
      # on MPTCP_JOIN_PORT); a peer that connected over rail 0 then opens one subflow per
      # announced address. Client-side `subflow` endpoints would aim at the peer's rail-0 address
      # and fail, so none are added.
      ip netns exec "$ns" sysctl -q -w net.mptcp.enabled=1
      ip -n "$ns" mptcp limits set subflow "$MAX_RAILS" add_addr_accepted "$MAX_RAILS"
      for ((k = 1; k < rails; k++)); do
        ip -n "$ns" mptcp endpoint add "$(rail_addr "$i" "$k")" dev "r$k" signal port "$MPTCP_JOIN_PORT"
      done
    fi
  done
  trap - EXIT
  log "up: $name with $hosts hosts x $rails rails$([ "$same_subnet" = 0 ] || echo ", same subnet")$([ "$mptcp" = 0 ] || echo ", mptcp"), tcp congestion control $(ip netns exec "$(host_ns 0)" sysctl -n net.ipv4.tcp_congestion_control)"
}

# teardown: remove every namespace of test bed $name, ending processes still inside them
# (a process holding a netns keeps it and its veths alive after `ip netns del`).
teardown() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086 # word splitting of the pid list is intended
      kill $pids 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || break
        sleep 0.2
      done
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
}

cmd_down() {
  check_flags
  validate_name
  require_root "$PROG down"
  teardown
}

cmd_shape() {
  check_flags --rail --rate --host
  validate_name
  require_root "$PROG shape"
  discover
  validate_rail
  [ -n "$rates" ] || die "shape: --rate is required (Mbit/s, 0 = unshaped)"
  is_uint "$rates" || die "--rate: want an integer Mbit/s (0 = unshaped), got '$rates'"
  local rate=$((10#$rates))
  local i
  if [ -n "$host" ]; then
    validate_host
    set_rate "$host" "$rail" "$rate"
  else
    for ((i = 0; i < n_hosts; i++)); do set_rate "$i" "$rail" "$rate"; done
  fi
}

cmd_cut_restore() { # up|down
  check_flags --host --rail
  validate_name
  require_root "$PROG $cmd"
  discover
  validate_host
  validate_rail
  ip -n "$(switch_ns)" link set "h${host}r$rail" "$1"
}

cmd_exec() {
  check_flags --host --
  validate_name
  discover
  validate_host
  [ ${#exec_argv[@]} -gt 0 ] || die "exec: give the command after --, e.g. $PROG exec --name $name --host 0 -- ip addr"
  exec ip netns exec "$(host_ns "$host")" "${exec_argv[@]}"
}

cmd_addr() {
  check_flags --host --rail
  validate_name
  discover
  validate_host
  validate_rail
  rail_addr "$host" "$rail"
}

cmd_status() {
  check_flags
  validate_name
  discover
  local i k ns state rate_s addr mptcp_s
  echo "testbed $name: $n_hosts hosts x $n_rails rails, $([ "$same_subnet" = 1 ] && echo "same subnet 10.100.0.0/16" || echo "one /24 per rail"), tcp congestion control $(ip netns exec "$(host_ns 0)" sysctl -n net.ipv4.tcp_congestion_control)"
  printf '%-5s %-5s %-12s %-5s %-17s %-10s %-12s %s\n' HOST RAIL NETNS IFACE ADDRESS STATE RATE MPTCP
  for ((i = 0; i < n_hosts; i++)); do
    ns=$(host_ns "$i")
    # The kernel enables MPTCP in every netns by default; what `up --mptcp` adds is accepting
    # announced addresses (and announcing its own), so report that.
    mptcp_s=off
    if ip -n "$ns" mptcp limits show 2>/dev/null | grep -Eq 'add_addr_accepted [1-9]'; then mptcp_s=on; fi
    for ((k = 0; k < n_rails; k++)); do
      addr=$(ip -n "$ns" -4 -o addr show dev "r$k" | awk '{print $4}' | head -n1)
      # Host side admin state, then carrier from the switch port (cut = port down).
      if ! ip -n "$ns" link show "r$k" | grep -q '[<,]UP[,>]'; then
        state="admin-down"
      elif ! ip -n "$(switch_ns)" link show "h${i}r$k" | grep -q '[<,]UP[,>]'; then
        state="cut"
      else
        state="up"
      fi
      rate_s=$(tc -n "$ns" qdisc show dev "r$k" root | sed -n 's/.*tbf .*rate \([^ ]*\).*/\1/p')
      printf '%-5s %-5s %-12s %-5s %-17s %-10s %-12s %s\n' "$i" "$k" "$ns" "r$k" "${addr:-none}" \
        "$state" "${rate_s:-unshaped}" "$mptcp_s"
    done
  done
}

case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  shape) cmd_shape ;;
  cut) cmd_cut_restore down ;;
  restore) cmd_cut_restore up ;;
  exec) cmd_exec ;;
  addr) cmd_addr ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$cmd' (want up, down, shape, cut, restore, exec, addr or status)" ;;
esac
