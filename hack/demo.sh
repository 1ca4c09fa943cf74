#!/usr/bin/env bash
# The product demo (`make demo`): Nezha installed on a real Kubernetes, a job training on two
# rails, one rail cut mid-training, the job carrying on and healing.
#
#   hack/demo.sh [--cluster auto|kind|local] [--keep] [--seconds S] [--cut-after S] [--cut-for S]
#                [--rate MBIT] [--out DIR]
#   hack/demo.sh -h | --help
#
#   --cluster C     kind (3 nodes, needs Docker), local (one node, needs root) or auto (default, or
#                   DEMO_CLUSTER): kind where `docker info` answers, the local cluster otherwise
#   --keep          leave the cluster, the release and the job running at the end (or DEMO_KEEP=1)
#   --seconds S     how long the job trains (default 100; must leave time for the steps below)
#   --cut-after S   seconds of two-rail training before the cut (default 20)
#   --cut-for S     seconds the rail stays cut (default 20)
#   --rate MBIT     emulated speed of each rail in Mbit/s (default 200; 0 = unshaped veths)
#   --out DIR       where the manifests, samples, rank 0's log and the plot go (default build/demo)
#
# Needs `make images` and `make images-train-example` (the Makefile's demo target builds them) and
# `make setup`; on kind, Docker; on the local cluster, root. Steps:
#   1. the cluster, reused if it is already up (then left up):
#      kind: hack/kind.sh up, 3 nodes, rails = Docker networks (eth1, eth2 on every node), Multus,
#            whereabouts; the two workers run on different nodes (hack/lib/demo-kind.sh)
#      local: hack/local-cluster.sh up, one node, rails = host veths nzr0/nzr1
#            (hack/lib/demo-local.sh)
#   2. the four images loaded into it (operator, rail-agent, runtime, train-example);
#      `helm upgrade --install` of charts/nezha
#   3. one RailClass per rail (macvlan on the rail's node interface, chained with nezha-rail)
#   4. a MultiRailJob of two workers training on both rails: examples/train_cnn.py (a small CNN,
#      DDP) with torch.distributed backend "nezha", image nezha/train-example, for --seconds;
#      the rails are shaped to --rate with TBF (kind: each worker node's eth1/eth2; local: each
#      worker's rail interfaces), because both clusters' rails are limited only by the CPU
#   5. rail 1 set down mid-training on one node (what a pulled cable does; kind: eth2 inside rank
#      1's node, local: the host end of the veth), then up again
#   6. the story: `kubectl get mrj` before/during/after, the job's events, throughput per phase
#      from rank 0's runtime metrics (/metrics on port 9402, served by libnezha inside the torch
#      process), each rank's final loss and parameter digest (they must agree), and a PNG plot
#   7. the cluster taken down if this run brought it up (not with --keep / DEMO_KEEP=1)
#
# In Nezha's own sandbox (no registry), kind needs NEZHA_KIND_SANDBOX=1 (hack/kind-sandbox/).
# Exit codes: 0 ok, 1 a step failed, 2 bad usage.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=demo.sh
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"
# shellcheck source=hack/lib/demo-steps.sh
source "$REPO/hack/lib/demo-steps.sh"
# shellcheck source=hack/lib/docker-check.sh
source "$REPO/hack/lib/docker-check.sh"

usage() {
  sed -n '5,16p' "$0" | sed 's/^# \{0,1\}//'
}

KEEP=${DEMO_KEEP:-0}
CLUSTER=${DEMO_CLUSTER:-auto}
SECONDS_TRAIN=100
CUT_AFTER=20
CUT_FOR=20
RATE_MBIT=200
OUT="$REPO/build/demo"

need_value() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1: needs a value (see --help)"; fi
}

while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --keep) KEEP=1 ;;
    --cluster)
      need_value "$@"
      CLUSTER=$2
      shift
      ;;
    --seconds)
      need_value "$@"
      SECONDS_TRAIN=$2
      shift
      ;;
    --cut-after)
      need_value "$@"
      CUT_AFTER=$2
      shift
      ;;
    --cut-for)
      need_value "$@"
      CUT_FOR=$2
      shift
      ;;
    --rate)
      need_value "$@"
      RATE_MBIT=$2
      shift
      ;;
    --out)
      need_value "$@"
      OUT=$2
      shift
      ;;
    *)
      usage >&2
      die "unknown argument '$1'"
      ;;
  esac
  shift
done

[[ $KEEP =~ ^[01]$ ]] || die "DEMO_KEEP: want 0 or 1, got '$KEEP'"
case $CLUSTER in
  kind | local) ;;
  auto)
    if why=$(docker_problem); then
      CLUSTER=kind
    else
      log "using the local cluster, not kind: $why"
      CLUSTER=local
    fi
    ;;
  *) die "--cluster (or DEMO_CLUSTER): want auto, kind or local, got '$CLUSTER'" ;;
esac
uint_in_range --seconds "$SECONDS_TRAIN" 30 3600
uint_in_range --cut-after "$CUT_AFTER" 5 600
uint_in_range --cut-for "$CUT_FOR" 5 600
uint_in_range --rate "$RATE_MBIT" 0 100000
# The job must still be training after the rail is back: allow ~30 s for the operator and the
# runtime to heal it, and a few seconds of two-rail training after that.
((10#$SECONDS_TRAIN >= 10#$CUT_AFTER + 10#$CUT_FOR + 40)) ||
  die "--seconds $SECONDS_TRAIN: want at least --cut-after + --cut-for + 40 = $((10#$CUT_AFTER + 10#$CUT_FOR + 40))"

# The platform_* functions of the chosen cluster.
if [ "$CLUSTER" = kind ]; then
  # shellcheck source=hack/lib/demo-kind.sh
  source "$REPO/hack/lib/demo-kind.sh"
else
  # shellcheck source=hack/lib/demo-local.sh
  source "$REPO/hack/lib/demo-local.sh"
fi
demo_main
