#!/usr/bin/env bash
# For users on GPU nodes: proves an NCCL job uses Nezha's plugin over the rails and survives a
# rail cut. Nothing here ran on a GPU while Nezha was built (there is none on the build
# machines); docs/nccl.md says what was and was not verified.
#
#   hack/gpu-check.sh --one-node [...]   the one-GPU proof on a rail test bed: two processes on
#                                        one GPU as two hosts (--one-node --help; docs/nccl.md)
#   hack/gpu-check.sh [-p PLUGIN_DIR] [-n GPUS] [-b MAX_BYTES] [-c RAIL_IF] [-t SECONDS]
#
#   -p DIR   where libnccl-net-nezha.so is (default /opt/nezha/lib)
#   -n N     GPUs on this node to use (default: all, from nvidia-smi)
#   -b SIZE  largest all_reduce_perf size (default 1G)
#   -c IF    also cut rail interface IF for -t seconds in the middle of a long run (needs root;
#            `ip link set IF down`, then up again)
#
# Needs NEZHA_RAILS (e.g. r0=eth1:tcp,r1=eth2:tcp), nccl-tests' all_reduce_perf on PATH (build
# it from github.com/NVIDIA/nccl-tests with MPI=1 for multi-node runs) and a CUDA-capable NCCL.
# For multi-node runs start this under your MPI launcher; every rank must see the same rails.
set -euo pipefail
if [ "${1:-}" = --one-node ]; then
  shift
  exec "$(dirname "$0")/lib/gpu-one-node.sh" "$@"
fi
plugin_dir=/opt/nezha/lib gpus="" max=1G cut_if="" cut_s=5
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "p:n:b:c:t:h" opt; do
  case $opt in
    p) plugin_dir=$OPTARG ;;
    n) gpus=$OPTARG ;;
    b) max=$OPTARG ;;
    c) cut_if=$OPTARG ;;
    t) cut_s=$OPTARG ;;
    *) usage ;;
  esac
done
die() { echo "gpu-check: $*" >&2; exit 1; }
[ -n "${NEZHA_RAILS:-}" ] || die "NEZHA_RAILS is not set (e.g. r0=eth1:tcp,r1=eth2:tcp)"
[ -e "$plugin_dir/libnccl-net-nezha.so" ] || die "no $plugin_dir/libnccl-net-nezha.so (-p DIR)"
command -v all_reduce_perf >/dev/null || die "all_reduce_perf (nccl-tests) is not on PATH"
if [ -z "$gpus" ]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found; give -n GPUS"
  gpus=$(nvidia-smi -L | wc -l)
fi

export LD_LIBRARY_PATH="$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NET_PLUGIN=nezha NCCL_NET=nezha NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
log=$(mktemp /tmp/gpu-check.XXXXXX.log)
echo "gpu-check: rails $NEZHA_RAILS, $gpus GPU(s), log $log"

run() { all_reduce_perf -b 8 -e "$max" -f 2 -g "$gpus" "$@" 2>&1 | tee -a "$log"; }
run -n 20
# What proves the plugin carried the traffic: NCCL names the plugin it loaded and the network
# it chose, and the plugin names its rails.
echo "---- evidence"
grep -E "NET/Plugin.*(nezha|Loaded)|Using network nezha|NET/Nezha : using rails" "$log" || {
  echo "gpu-check: FAIL: no line shows NCCL using the nezha network (see $log)"
  exit 1
}
# NCCL on one node with NVLink/PCIe may never touch the network; say so instead of passing.
if ! grep -q "via NET/nezha" "$log"; then
  echo "gpu-check: NOTE: no channel went 'via NET/nezha' (single node? NCCL used P2P/SHM). Run across nodes."
fi

if [ -n "$cut_if" ]; then
  [ "$(id -u)" = 0 ] || die "-c needs root (ip link set)"
  echo "---- rail cut: $cut_if down for ${cut_s}s in the middle of a long run"
  run -n 400 -w 5 &
  job=$!
  sleep 5
  ip link set "$cut_if" down
  sleep "$cut_s"
  ip link set "$cut_if" up
  if wait $job; then
    echo "gpu-check: PASS: all_reduce_perf finished through the cut (#wrong column must be 0 above)"
  else
    echo "gpu-check: FAIL: all_reduce_perf failed during the cut (see $log)"
    exit 1
  fi
  grep -E "NET/Nezha : rail .* failed|NET/Nezha : rail .* is back" "$log" || true
fi
