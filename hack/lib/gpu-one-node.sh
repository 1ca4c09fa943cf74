#!/usr/bin/env bash
# hack/gpu-check.sh --one-node: the one-GPU proof of the NCCL plugin (docs/nccl.md, "One-GPU
# proof"). Two processes share one GPU but look like two hosts to NCCL (NCCL_HOSTID differs,
# NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1), each in a host namespace of the rail test bed (rails
# = veth pairs, hack/testbed.sh), and run torch.distributed `nccl` all_reduce on CUDA tensors
# through libnccl-net-nezha.so. Checks, each printed PASS or FAIL and kept in OUT/summary.txt:
#   plugin-loaded   NCCL's log names the nezha plugin/network it loaded
#   via-net-nezha   NCCL's channels go `via NET/nezha` (not P2P, SHM or its own sockets)
#   exact-1rail / exact-2rails   every all_reduce result equal to the expected sum
#   busbw-2-vs-1    bus bandwidth on 2 rails >= MIN_SPEEDUP x 1 rail (TBF-shaped rails)
#   rail-cut        rail 1 cut in the middle of an all_reduce loop: the job goes on, all exact
#
#   hack/gpu-check.sh --one-node [--dry-run | --rehearse-on-cpu] [--out DIR] [--plugin-dir DIR]
#                                [--python PY]
#                                [--gpu N] [--bytes N] [--iters N] [--rate MBIT]
#                                [--min-speedup X] [--cut-seconds S]
#
#   --dry-run        everything but the CUDA part: bed up, plugin found, environment composed
#                    (OUT/env.rank*.txt), then stop and say what needs a GPU
#   --rehearse-on-cpu every step with gloo on CPU tensors instead of NCCL on the GPU: checks the
#                    procedure itself (ranks, exactness, the cut) where there is no GPU; the
#                    NCCL checks (plugin-loaded, via-net-nezha, busbw-2-vs-1) are skipped
#   --out DIR        evidence: rank logs (NCCL_DEBUG=INFO), results (JSON), summary.txt
#                    (default: a new /tmp/gpu-check-one-node.XXXXXX)
#   --plugin-dir DIR where libnccl-net-nezha.so is (default: build/runtime of this checkout)
#   --python PY      a Python with a CUDA build of torch (default: python3)
#   --gpu N          the GPU both ranks share (default 0)
#   --bytes N        bytes per all_reduce (default 67108864)
#   --iters N        timed all_reduces per bandwidth run (default 20)
#   --rate MBIT      TBF rate of each rail (default 2000): the rails, not the CPU, must be the
#                    bottleneck for the 1-vs-2-rail comparison to mean anything
#   --min-speedup X  busbw-2-vs-1 passes at >= X (default 1.9, the test bed's bar)
#   --cut-seconds S  how long rail 1 stays cut (default 3)
#
# Needs root (network namespaces). Exit 0 iff every check passed (dry run: iff set-up worked).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$here/../.." && pwd)
PROG="gpu-check --one-node"
# shellcheck source=hack/lib/common.sh
source "$here/common.sh"

usage() { sed -n '13,35p' "$0" | sed 's/^# \{0,1\}//'; }
dry_run=0 rehearse=0 out="" plugin_dir="$REPO/build/runtime" py=python3 gpu=0 bytes=67108864 iters=20
rate=2000 min_speedup=1.9 cut_s=3
need() { [ $# -ge 2 ] || die "$1: needs a value"; }
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --dry-run) dry_run=1; shift; continue ;;
    --rehearse-on-cpu) rehearse=1; shift; continue ;;
    --out) need "$@"; out=$2 ;;
    --plugin-dir) need "$@"; plugin_dir=$2 ;;
    --python) need "$@"; py=$2 ;;
    --gpu) need "$@"; uint_in_range --gpu "$2" 0 63; gpu=$2 ;;
    --bytes) need "$@"; uint_in_range --bytes "$2" 4 17179869184; bytes=$2 ;;
    --iters) need "$@"; uint_in_range --iters "$2" 1 100000; iters=$2 ;;
    --rate) need "$@"; uint_in_range --rate "$2" 10 100000; rate=$2 ;;
    --min-speedup)
      need "$@"
      [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--min-speedup: want a number like 1.9, got '$2'"
      min_speedup=$2 ;;
    --cut-seconds) need "$@"; uint_in_range --cut-seconds "$2" 1 600; cut_s=$2 ;;
    *) die "unknown argument '$1' (--help lists the flags)" ;;
  esac
  shift 2
done

if [ "$dry_run" = 1 ] && [ "$rehearse" = 1 ]; then die "--dry-run and --rehearse-on-cpu: pick one"; fi

# ---- pre-flight: nothing is set up before everything needed is known to be there ------------
require_root "$PROG"
plugin="$plugin_dir/libnccl-net-nezha.so"
[ -f "$plugin" ] || fail "--plugin-dir: no $plugin (build it: make build-runtime)"
plugin=$(realpath "$plugin")
# The ABI tables NCCL looks up by name (dlsym), newest first.
exports=$(python3 - "$plugin" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
print(" ".join(v for v in ("ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v8")
               if hasattr(lib, v)))
PY
) || fail "--plugin-dir: $plugin does not load (see above)"
[ -n "$exports" ] || fail "$plugin exports no ncclNetPlugin_v12/v11/v8 table"
# What the GPU part needs: torch built with CUDA, and a GPU it can see.
torch_probe() {
  CUDA_VISIBLE_DEVICES=$gpu "$py" - <<'PY' 2>&1
import sys
try:
    import torch
except ImportError as e:
    sys.exit(f"no torch ({e})")
if torch.version.cuda is None:
    sys.exit(f"torch {torch.__version__} is built without CUDA")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
      f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_name(0)}")
PY
}
# Its last line is the verdict (warnings from importing torch may come first).
if torch_info=$(torch_probe); then
  torch_ok=1
  torch_info=${torch_info##*$'\n'}
else
  torch_ok=0
  torch_info=${torch_info##*$'\n'}
  if [ "$rehearse" = 1 ] && [[ $torch_info != "no torch"* ]]; then
    torch_info="$torch_info (rehearsal: gloo on CPU)"
  elif [ "$dry_run" = 0 ]; then
    fail "--python $py: $torch_info. The one-GPU proof needs a GPU and a CUDA build of torch" \
      "(--dry-run goes as far as a machine without them can)"
  fi
fi
if [ -z "$out" ]; then out=$(mktemp -d /tmp/gpu-check-one-node.XXXXXX); fi
mkdir -p "$out" || fail "--out: cannot create $out"
out=$(realpath "$out")
: >"$out/summary.txt"

# ---- the bed: 2 hosts x 2 rails (runtime/tests/testbed/lib.sh) ------------------------------
TESTBED="$REPO/hack/testbed.sh"
LOG_PREFIX="gpu-check"
# shellcheck source=runtime/tests/testbed/lib.sh
source "$REPO/runtime/tests/testbed/lib.sh"
note() { echo "$*" | tee -a "$out/summary.txt"; }
pass() { passes=$((passes + 1)); note "gpu-check: PASS $*"; }
fail() { failures=$((failures + 1)); note "gpu-check: FAIL $*"; }
testbed_begin nzgpu
# reno, not the machine's default: BBR (v1) pauses every flow for ~200 ms each 10 s (PROBE_RTT),
# and a striped message waits for its slowest rail (docs/nccl.md, NEZHA_TCP_CONGESTION).
bed_up 2 2 --rate "$rate,$rate" --tcp-cc reno
note "gpu-check: plugin $plugin ($exports)"
note "gpu-check: torch: $torch_info"
note "gpu-check: bed nzgpu: 2 hosts x 2 rails at $rate Mbit/s (reno), evidence in $out"

# rank_env RANK RAILS PORT: the environment of one rank, one VAR=VALUE per line. The plugin by
# name with its directory first on LD_LIBRARY_PATH: every NCCL version resolves `nezha` to
# libnccl-net-nezha.so there, while a path in NCCL_NET_PLUGIN only newer ones accept.
rank_env() {
  local r=$1 rails=$2 port=$3 spec="" k
  for ((k = 0; k < rails; k++)); do spec+="${spec:+,}r$k=r$k:tcp"; done
  cat <<ENV
CUDA_VISIBLE_DEVICES=$gpu
NCCL_HOSTID=nezha-gpu-check-host$r
NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1
NCCL_NET_PLUGIN=nezha
NCCL_NET=nezha
NCCL_SOCKET_IFNAME=r0
NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,NET
LD_LIBRARY_PATH=$(dirname "$plugin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NEZHA_RAILS=$spec
NEZHA_JOB_TOKEN=$TOKEN
MASTER_ADDR=$(addr 0 0)
MASTER_PORT=$port
RANK=$r
WORLD_SIZE=2
PYTHONUNBUFFERED=1
ENV
  if [ "$rehearse" = 1 ]; then echo GLOO_SOCKET_IFNAME=r0; fi
}
for r in 0 1; do rank_env "$r" 2 29500 >"$out/env.rank$r.txt"; done
if [ "$dry_run" = 1 ]; then
  note "gpu-check: dry run: bed up, plugin found, environment composed ($out/env.rank0.txt," \
    "$out/env.rank1.txt); stopping before the CUDA part, which needs a GPU and a CUDA build of" \
    "torch ($([ "$torch_ok" = 1 ] && echo "this machine has them: run without --dry-run" ||
      echo "here: $torch_info"))"
  exit 0
fi

# run_ranks NAME RAILS PORT ARGS...: both ranks of gpu-allreduce.py; 0 iff both exit 0. Rank I's
# output (NCCL's INFO lines among it) goes to OUT/NAME.rankI.log, its result to NAME.rankI.json.
run_ranks() {
  local name=$1 rails=$2 port=$3 r pids=() ok=0
  shift 3
  for r in 0 1; do
    rank_env "$r" "$rails" "$port" >"$out/$name.env.rank$r.txt"
    mapfile -t envs <"$out/$name.env.rank$r.txt"
    "$TESTBED" exec --name "$BED" --host "$r" -- env "${envs[@]}" "$py" "$here/gpu-allreduce.py" \
      --out "$out/$name.rank$r.json" "${cpu_flag[@]}" "$@" >"$out/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || ok=1; done
  return $ok
}
cpu_flag=()
if [ "$rehearse" = 1 ]; then cpu_flag=(--cpu); fi
# get NAME EXPR: a Python expression over j = rank 0's result.
get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" \
  "$out/$1.rank0.json" "$2" 2>/dev/null || echo "?"; }

for rails in 1 2; do
  name=bench-${rails}rail
  if run_ranks "$name" "$rails" $((29500 + rails)) --mode bench --bytes "$bytes" --iters "$iters"; then
    pass "exact-${rails}rail$([ "$rails" = 1 ] || echo s): $(get "$name" "j['ops']") all_reduces of" \
      "$(get "$name" "j['bytes']") bytes exact on both ranks, busbw $(get "$name" "round(j['busbw_gbs'], 3)") GB/s"
  else
    fail "exact-${rails}rail$([ "$rails" = 1 ] || echo s): see $out/$name.rank*.log"
  fi
done
speedup=$(python3 -c "import json,sys
a, b = (json.load(open(f))['busbw_gbs'] for f in sys.argv[1:])
print(round(b / a, 3))" "$out/bench-1rail.rank0.json" "$out/bench-2rail.rank0.json" 2>/dev/null || echo "?")
if [ "$rehearse" = 1 ]; then
  note "gpu-check: SKIP plugin-loaded, via-net-nezha, busbw-2-vs-1: a rehearsal runs gloo on one" \
    "interface, not NCCL (2 rails = ${speedup}x 1 rail here means nothing)"
else
  if grep -hE "NET/Plugin.*([Nn]ezha|Loaded)|Using network nezha" "$out"/bench-*.log >"$out/plugin-lines.txt"; then
    pass "plugin-loaded: $(head -1 "$out/plugin-lines.txt")"
  else
    fail "plugin-loaded: no NCCL line names the nezha plugin (NCCL_NET_PLUGIN=nezha from $plugin_dir)"
  fi
  if grep -h "via NET/nezha" "$out"/bench-*.log >"$out/channel-lines.txt"; then
    pass "via-net-nezha: $(wc -l <"$out/channel-lines.txt") channel lines, e.g. $(head -1 "$out/channel-lines.txt")"
  else
    fail "via-net-nezha: no channel went 'via NET/nezha' (P2P/SHM not disabled, or another network)"
  fi
  if [ "$speedup" != "?" ] && python3 -c "import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))" "$speedup" "$min_speedup"; then
    pass "busbw-2-vs-1: 2 rails = ${speedup}x 1 rail (want >= $min_speedup)"
  else
    fail "busbw-2-vs-1: 2 rails = ${speedup}x 1 rail (want >= $min_speedup)"
  fi
fi

# Rail 1 cut on host 0 once the loop runs, restored after cut_s seconds; the loop goes on for
# as long again after the restore.
loop_s=$((3 * cut_s + 10))
run_ranks cut 2 29503 --mode loop --bytes "$bytes" --iters 1 --seconds "$loop_s" \
  --ready "$out/cut.ready" &
job=$!
# Bounded (2 min: CUDA, torch and NCCL start-up come first), and over early if the job ended.
for ((i = 0; i < 1200; i++)); do
  [ -e "$out/cut.ready" ] || ! kill -0 "$job" 2>/dev/null && break
  sleep 0.1
done
t_cut=$(date +%s.%N)
cut_rail 0 1
sleep "$cut_s" # the length of the outage is the scenario, not a wait for an event
restore_rail 0 1
t_back=$(date +%s.%N)
if wait "$job"; then
  during=$(python3 -c "import json,sys
j = json.load(open(sys.argv[1])); a, b = float(sys.argv[2]), float(sys.argv[3])
print(sum(1 for t, _ in j['op_ms'] if a <= t <= b))" "$out/cut.rank0.json" "$t_cut" "$t_back")
  if [ "$during" -gt 0 ]; then
    pass "rail-cut: r1 cut for ${cut_s}s: $(get cut "j['ops']") all_reduces exact, $during completed" \
      "while r1 was down, longest $(get cut "round(j['max_op_ms'])") ms"
  else
    fail "rail-cut: no all_reduce completed while r1 was down (see $out/cut.rank*.log)"
  fi
else
  fail "rail-cut: the job failed or a result was wrong (see $out/cut.rank*.log)"
fi
note "gpu-check: $passes passed, $failures failed"
testbed_end
