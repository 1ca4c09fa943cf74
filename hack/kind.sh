#!/usr/bin/env bash
# A 3-node kind cluster with rails, for machines with Docker:
#
#   hack/kind.sh up           create it (1 control plane + 2 workers), one Docker network per rail
#                             attached to every node, Multus, the images from `make images` and the chart
#   hack/kind.sh down         delete the cluster and the rail networks
#   hack/kind.sh kubeconfig   print the path of the cluster's kubeconfig
#
# NOT RUN on Nezha's development machines (no registry to pull kind's node image from, and the
# locally built node image it would need is not written yet): this script is untested. What it
# does, step by step:
#   1. kind (sigs.k8s.io/kind, KIND_VERSION in hack/versions.sh) built with `go install` into the
#      tool cache; `kind create cluster` with kind's default CNI (kindnet) as the primary network.
#   2. Rails: `docker network create nezha-<name>-railK` (a /24 each) and `docker network connect`
#      of every node, in rail order, so rail K is interface eth<K+1> on every node: RailClass
#      hostInterface.name eth1, eth2, ... and macvlan NADs with that master. Cut a rail with
#      `docker exec NODE ip link set ethK down` or `docker network disconnect`.
#   3. Multus as the thin plugin (built from the Go module proxy like the local cluster's), copied
#      into every node with its kubeconfig (a ServiceAccount token), delegating eth0 to kindnet;
#      the NetworkAttachmentDefinition CRD from its client module.
#   4. `kind load image-archive` of build/images/*.tar, then `helm install` of charts/nezha with
#      imagePullPolicy Never.
# Rails need cluster-wide IPAM for their pod addresses (e.g. whereabouts); this script installs
# none, so RailClasses on kind must bring their own.
#
# Tunables (env, default): NEZHA_KIND_NAME (nezha), NEZHA_KIND_RAILS (2),
# NEZHA_KIND_NODE_IMAGE (empty: kind's default node image), NEZHA_KIND_RAIL_NET (172.31: rail K is
# 172.31.K.0/24). Sandboxes whose capability bounding set lacks CAP_SYS_RESOURCE cannot start
# privileged containers (kind nodes): see hack/kind-sandbox/README.md. That workaround is for
# Nezha's own sandbox only, never part of what users install.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=kind.sh
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"
# shellcheck source=hack/lib/cluster-env.sh
source "$REPO/hack/lib/cluster-env.sh"
# shellcheck source=hack/lib/cluster-build.sh
source "$REPO/hack/lib/cluster-build.sh"

NAME=${NEZHA_KIND_NAME:-nezha}
RAILS=${NEZHA_KIND_RAILS:-2}
NODE_IMAGE=${NEZHA_KIND_NODE_IMAGE:-}
RAIL_NET=${NEZHA_KIND_RAIL_NET:-172.31}
KIND="$NEZHA_TOOLS_BIN/kind-$KIND_VERSION"
KUBECONFIG_PATH="$NEZHA_CACHE/kind/$NAME.kubeconfig"
HELM="$NEZHA_TOOLS_BIN/helm-$HELM_VERSION"

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

validate() {
  [[ $NAME =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]] || die "NEZHA_KIND_NAME: want a short DNS label, got '$NAME'"
  uint_in_range NEZHA_KIND_RAILS "$RAILS" 1 4
  [[ $RAIL_NET =~ ^[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "NEZHA_KIND_RAIL_NET: want the first two octets (A.B), got '$RAIL_NET'"
}

kc() { "$NEZHA_KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

build_kind() {
  [ -x "$KIND" ] && return 0
  log "building kind $KIND_VERSION"
  mkdir -p "$NEZHA_TOOLS_BIN"
  local gobin="$NEZHA_CACHE/tools/gobin-kind-$KIND_VERSION"
  GOBIN="$gobin" go install "sigs.k8s.io/kind@$KIND_VERSION"
  mv "$gobin/kind" "$KIND"
  rm -rf "$gobin"
}

nodes() { "$KIND" get nodes --name "$NAME"; }

create_cluster() {
  local config="$NEZHA_CACHE/kind/$NAME.yaml"
  mkdir -p "$(dirname "$config")"
  cat >"$config" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
  local image_args=()
  [ -z "$NODE_IMAGE" ] || image_args=(--image "$NODE_IMAGE")
  "$KIND" create cluster --name "$NAME" --config "$config" --kubeconfig "$KUBECONFIG_PATH" "${image_args[@]}" --wait 120s
}

create_rails() {
  local k node
  for ((k = 0; k < RAILS; k++)); do
    docker network inspect "nezha-$NAME-rail$k" >/dev/null 2>&1 ||
      docker network create --driver bridge --subnet "$RAIL_NET.$k.0/24" "nezha-$NAME-rail$k" >/dev/null
    for node in $(nodes); do
      docker inspect -f '{{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}' "$node" |
        grep -qw "nezha-$NAME-rail$k" || docker network connect "nezha-$NAME-rail$k" "$node"
    done
  done
}

install_multus() {
  cluster_build_multus
  kc apply -f "$(cluster_nad_crd)" >/dev/null
  kc apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: ServiceAccount
metadata: {name: multus, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: nezha-kind-multus}
rules:
  - apiGroups: ["k8s.cni.cncf.io"]
    resources: ["*"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["pods", "pods/status"]
    verbs: ["get", "update", "patch"]
  - apiGroups: ["", "events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: nezha-kind-multus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nezha-kind-multus}
subjects: [{kind: ServiceAccount, name: multus, namespace: kube-system}]
EOF
  local token ca server node tmp
  token=$(kc -n kube-system create token multus --duration 8760h)
  ca=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  server="https://$NAME-control-plane:6443"
  tmp=$(mktemp -d)
  cat >"$tmp/multus.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: multus, user: {token: "$token"}}]
contexts: [{name: multus, context: {cluster: kind, user: multus}}]
current-context: multus
EOF
  cat >"$tmp/00-multus.conf" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
  "clusterNetwork": "/etc/cni/net.d/10-kindnet.conflist",
  "binDir": "/opt/cni/bin"
}
EOF
  for node in $(nodes); do
    docker exec "$node" mkdir -p /etc/cni/net.d/multus.d
    docker cp "$CLUSTER_BIN/multus-$MULTUS_VERSION" "$node:/opt/cni/bin/multus"
    docker cp "$tmp/multus.kubeconfig" "$node:/etc/cni/net.d/multus.d/multus.kubeconfig"
    docker cp "$tmp/00-multus.conf" "$node:/etc/cni/net.d/00-multus.conf"
  done
  rm -rf "$tmp"
}

load_images_and_chart() {
  local tar
  for tar in $("$REPO/hack/images.sh" --list); do
    [ -f "$tar" ] || fail "up: $tar is missing (run: make images)"
    "$KIND" load image-archive "$tar" --name "$NAME"
  done
  "$HELM" --kubeconfig "$KUBECONFIG_PATH" upgrade --install nezha "$REPO/charts/nezha" \
    -n nezha-system --create-namespace --set image.pullPolicy=Never --wait --timeout 5m
}

cmd_up() {
  require_cmd docker go jq
  [ -x "$NEZHA_KUBE_BIN/kubectl" ] || fail "up: no kubectl in $NEZHA_KUBE_BIN (run: hack/setup.sh)"
  [ -x "$HELM" ] || fail "up: no helm at $HELM (run: hack/setup.sh)"
  build_kind
  "$KIND" get clusters 2>/dev/null | grep -qx "$NAME" || create_cluster
  create_rails
  install_multus
  load_images_and_chart
  log "up: kind cluster $NAME with $RAILS rails (eth1..eth$RAILS on every node); export KUBECONFIG=$KUBECONFIG_PATH"
}

cmd_down() {
  if [ -x "$KIND" ]; then "$KIND" delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG_PATH" || true; fi
  local k
  for ((k = 0; k < 4; k++)); do
    docker network rm "nezha-$NAME-rail$k" >/dev/null 2>&1 || true
  done
  rm -f "$KUBECONFIG_PATH"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
validate
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$cmd' (want up, down or kubeconfig)" ;;
esac
