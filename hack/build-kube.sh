#!/usr/bin/env bash
# Builds Kubernetes and etcd binaries from the Go module proxy into the cache:
#   hack/build-kube.sh envtest   kube-apiserver, etcd, kubectl (for envtest: KUBEBUILDER_ASSETS)
#   hack/build-kube.sh node      + kube-controller-manager, kube-scheduler, kubelet (local cluster)
#   hack/build-kube.sh kind      + kubeadm, kube-proxy (the locally built kind node image)
#   hack/build-kube.sh envtest-oldest  kube-apiserver and etcd of KUBE_OLDEST_VERSION, the oldest
#                                      Kubernetes the chart claims (make test-chart-matrix)
#   hack/build-kube.sh node-oldest     the node set of KUBE_OLDEST_VERSION (make e2e-oldest)
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging repos with
# ./staging), so we build from a small wrapper module that pins every staging repo instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

set_name=${1:-envtest}
case "$set_name" in
  envtest) cmds=(kube-apiserver kubectl) ;;
  node) cmds=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet) ;;
  kind) cmds=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kubeadm kube-proxy) ;;
  envtest-oldest|node-oldest)
    # Same cache layout, another version: kube-<version>/bin holds its binaries and etcd.
    if [ "$set_name" = envtest-oldest ]; then
      cmds=(kube-apiserver)
    else
      cmds=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet)
    fi
    pinned_etcd="$NEZHA_KUBE_BIN/etcd"
    KUBE_VERSION=$KUBE_OLDEST_VERSION
    KUBE_STAGING_VERSION=$KUBE_OLDEST_STAGING_VERSION
    NEZHA_KUBE_BIN=$NEZHA_KUBE_OLDEST_BIN
    mkdir -p "$NEZHA_KUBE_BIN"
    # The pinned etcd serves every Kubernetes version from 1.29 on: reuse it instead of a rebuild.
    if [ -x "$pinned_etcd" ] && [ ! -e "$NEZHA_KUBE_BIN/etcd" ]; then cp "$pinned_etcd" "$NEZHA_KUBE_BIN/etcd"; fi
    ;;
  *) echo "build-kube.sh: unknown set '$set_name' (want envtest, node, kind, envtest-oldest or node-oldest)" >&2; exit 2 ;;
esac

mkdir -p "$NEZHA_KUBE_BIN"
log() { echo "build-kube: $*" >&2; }

build_kubernetes() {
  local missing=()
  for c in "${cmds[@]}"; do [ -x "$NEZHA_KUBE_BIN/$c" ] || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local src="$NEZHA_CACHE/src/kube-$KUBE_VERSION"
  mkdir -p "$src"
  if [ ! -f "$src/go.sum" ]; then
    log "preparing wrapper module for k8s.io/kubernetes $KUBE_VERSION"
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    {
      echo "module nezha.local/kube-build"
      echo
      echo "go 1.24"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      grep -oE '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$gomod" | awk '{print $1}' | sort -u |
        while read -r repo; do echo "replace $repo => $repo $KUBE_STAGING_VERSION"; done
    } > "$src/go.mod"
    cat > "$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1) || log "go mod tidy reported problems in $src; the build below will say if they matter"
    (cd "$src" && GOFLAGS=-mod=mod go mod download)
  fi
  local major minor
  major=$(echo "$KUBE_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')
  minor=$(echo "$KUBE_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
  for c in "${missing[@]}"; do
    log "building $c $KUBE_VERSION (cold: minutes)"
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$NEZHA_KUBE_BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$NEZHA_KUBE_BIN/$c.tmp" "$NEZHA_KUBE_BIN/$c"
  done
}

build_etcd() {
  [ -x "$NEZHA_KUBE_BIN/etcd" ] && return 0
  local src="$NEZHA_CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$src"
  if [ ! -f "$src/go.mod" ]; then
    printf 'module nezha.local/etcd-build\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > "$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1) || log "go mod tidy reported problems in $src; the build below will say if they matter"
  fi
  log "building etcd $ETCD_VERSION"
  (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$NEZHA_KUBE_BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$NEZHA_KUBE_BIN/etcd.tmp" "$NEZHA_KUBE_BIN/etcd"
}

build_kubernetes
build_etcd
echo "$NEZHA_KUBE_BIN"
