#!/usr/bin/env bash
# For users on real RDMA hardware: what Nezha finds on this node for each rail — RDMA devices,
# ports, link layers, and the device/port/GID every rail interface resolves to (no GID-index
# guessing) — and whether the runtime can use the rails' transports. Nothing here ran on RDMA
# hardware while Nezha was built (the build machines have none); see docs/rdma.md.
#
#   hack/hw-check.sh [-b BIN_DIR] [-s SYSFS] [IFACE...]
#
#   -b DIR   where nezha-rdma-info and nezha-bench are (default build/runtime, else /opt/nezha/bin)
#   -s DIR   sysfs root (default /sys)
#   IFACE    rail interfaces (default: the interfaces named in NEZHA_RAILS)
set -euo pipefail
bin="" sysfs=/sys
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "b:s:h" opt; do
  case $opt in
    b) bin=$OPTARG ;;
    s) sysfs=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
die() { echo "hw-check: $*" >&2; exit 1; }
if [ -z "$bin" ]; then
  for d in build/runtime /opt/nezha/bin; do [ -x "$d/nezha-rdma-info" ] && bin=$d && break; done
fi
if [ -z "$bin" ] || [ ! -x "$bin/nezha-rdma-info" ]; then
  die "nezha-rdma-info not found (make build-runtime, or -b DIR)"
fi

ifaces=("$@")
if [ ${#ifaces[@]} -eq 0 ]; then
  [ -n "${NEZHA_RAILS:-}" ] || die "give rail interfaces or set NEZHA_RAILS (name=iface:transport,...)"
  IFS=, read -ra entries <<<"$NEZHA_RAILS"
  for e in "${entries[@]}"; do
    i=${e#*=}
    ifaces+=("${i%%:*}")
  done
fi

echo "== RDMA devices under $sysfs/class/infiniband"
found=0
for dev in "$sysfs"/class/infiniband/*; do
  [ -e "$dev" ] || continue
  found=1
  for port in "$dev"/ports/*; do
    printf '%s port %s: %s, %s, %s\n' "$(basename "$dev")" "$(basename "$port")" \
      "$(cat "$port/link_layer" 2>/dev/null || echo '?')" "$(cat "$port/state" 2>/dev/null || echo '?')" \
      "$(cat "$port/rate" 2>/dev/null || echo '?')"
  done
done
[ $found = 1 ] || echo "(none: this node has no RDMA device visible here)"

echo "== rails"
rc=0
"$bin/nezha-rdma-info" --sysfs "$sysfs" "${ifaces[@]}" || rc=1

if command -v ibv_devinfo >/dev/null; then
  echo "== ibv_devinfo (rdma-core)"
  ibv_devinfo 2>&1 | grep -E "hca_id|port:|state|link_layer|active_mtu" || true
fi

echo "== rdma rail: nezha-bench, two ranks on this node over each interface's HCA (RC loopback)"
if [ -x "$bin/nezha-bench" ]; then
  token=$(od -An -N32 -tx1 /dev/urandom | tr -d " \n")
  for ifc in "${ifaces[@]}"; do
    port=$((29000 + RANDOM % 1000))
    pids=()
    for r in 0 1; do
      NEZHA_RAILS="probe=$ifc:rdma" NEZHA_RANK=$r NEZHA_WORLD_SIZE=2 NEZHA_JOB_TOKEN=$token \
        NEZHA_RENDEZVOUS=127.0.0.1:$port NEZHA_RENDEZVOUS_TIMEOUT_MS=10000 "$bin/nezha-bench" \
        --op allreduce --check --min-bytes 4 --max-bytes 64M --factor 16 --iters 3 \
        >"/tmp/hw-check.$ifc.$r.log" 2>&1 &
      pids+=($!)
    done
    ok=1
    for p in "${pids[@]}"; do wait "$p" || ok=0; done
    if [ "$ok" = 1 ]; then
      echo "$ifc: PASS (allreduce 4 B..64 MiB checked)"
      tail -3 "/tmp/hw-check.$ifc.0.log"
    else
      echo "$ifc: FAIL"
      tail -3 "/tmp/hw-check.$ifc.0.log" "/tmp/hw-check.$ifc.1.log"
      rc=1
    fi
  done
fi
echo "hw-check: the rdma transport has only run against a test double of libibverbs; the sharp"
echo "transport is not in this build. Report this output with your hardware model (docs/rdma.md)."
exit $rc
