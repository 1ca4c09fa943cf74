#!/usr/bin/env bash
# Scale benchmark of the operator (not part of `make test`): a MultiRailJob with N workers
# (default 1000) on kwok-simulated nodes, scheduled by a real kube-scheduler against a real
# kube-apiserver. Prints creation/running/degradation times and the operator's peak memory.
#
#   operator/hack/scale-bench.sh [--workers 1000] [--nodes 50]
#
# Needs the envtest binaries plus kube-scheduler (hack/build-kube.sh node) and kwok (built here
# from its Go module on first use, ~3 min on 2 cores). No root.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../hack/versions.sh
source "$root/hack/versions.sh"

kwok="$NEZHA_TOOLS_BIN/kwok"
if [[ ! -x $kwok ]]; then
  echo "building kwok $KWOK_VERSION into $NEZHA_TOOLS_BIN" >&2
  GOBIN="$NEZHA_TOOLS_BIN" GOFLAGS=-p=2 go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi
for bin in kube-apiserver etcd kube-scheduler; do
  if [[ ! -x $NEZHA_KUBE_BIN/$bin ]]; then
    echo "scale-bench.sh: $NEZHA_KUBE_BIN/$bin missing (run hack/build-kube.sh node)" >&2
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

(cd "$root" && go build -o "$work/nezha-operator" ./operator/cmd/nezha-operator)
cd "$root"
KUBEBUILDER_ASSETS="$NEZHA_KUBE_BIN" go run ./operator/hack/scalebench \
  --operator "$work/nezha-operator" --kwok "$kwok" --kwok-stages "$stages" \
  --scheduler "$NEZHA_KUBE_BIN/kube-scheduler" "$@"
