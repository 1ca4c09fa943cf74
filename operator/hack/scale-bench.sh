#!/usr/bin/env bash
# Scale benchmark of the operator (make bench-scale; not part of `make test`): a MultiRailJob with
# N workers (default 1000) on M kwok-simulated nodes (default 500) against a real kube-apiserver
# and etcd, with one simulated rail agent per node. Prints the operator's share (creation, status
# after the last pod runs, Degraded after a rail event), its memory and CPU, PASS/MISS against
# the scale targets (docs/operator-scale.md), the machine and its load.
#
#   operator/hack/scale-bench.sh [--workers 1000] [--nodes 500] [--rails 2] [--scheduler PATH]
#                                 [--operator-config 'workerPods: {createParallelism: 32}']
#
# Needs the envtest binaries (make setup) and kwok (built here from its Go module on first use,
# ~5 min on 2 cores). Pods are bound by the bench unless --scheduler names a kube-scheduler
# (hack/build-kube.sh node builds one). No root.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../hack/versions.sh
source "$root/hack/versions.sh"

# Like hack/setup.sh's go_tool: a versioned binary in the tools cache, a plain-name link to it.
kwok="$NEZHA_TOOLS_BIN/kwok-$KWOK_VERSION"
if [[ ! -x $kwok ]]; then
  echo "building kwok $KWOK_VERSION into $NEZHA_TOOLS_BIN" >&2
  gobin="$NEZHA_CACHE/tools/gobin-kwok-$KWOK_VERSION"
  (cd / && GOBIN="$gobin" GOFLAGS=-p=2 go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  mkdir -p "$NEZHA_TOOLS_BIN"
  mv "$gobin/kwok" "$kwok"
  rm -rf "$gobin"
fi
ln -sf "kwok-$KWOK_VERSION" "$NEZHA_TOOLS_BIN/kwok"
for bin in kube-apiserver etcd; do
  if [[ ! -x $NEZHA_KUBE_BIN/$bin ]]; then
    echo "scale-bench.sh: $NEZHA_KUBE_BIN/$bin missing (run make setup)" >&2
    exit 1
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kwok's stages ship in its module: nodes become Ready and keep a heartbeat, pods become Running.
# (Run outside the repository so go.mod is never touched.)
kwok_dir=$(cd "$work" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
stages="$work/stages.yaml"
for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml; do
  cat "$kwok_dir/kustomize/stage/$f"
  echo "---"
done >"$stages"

cd "$root"
go build -o "$work/nezha-operator" ./operator/cmd/nezha-operator
go build -o "$work/scalebench" ./operator/hack/scalebench
KUBEBUILDER_ASSETS="$NEZHA_KUBE_BIN" "$work/scalebench" \
  --operator "$work/nezha-operator" --kwok "$kwok" --kwok-stages "$stages" "$@"
