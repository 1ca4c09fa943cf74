#!/usr/bin/env bash
# A 3-node kind cluster with rails, for machines with Docker:
#
#   hack/kind.sh up           create it (1 control plane + 2 workers), one Docker network per rail
#                             attached to every node, Multus, the images from `make images` and the chart
#   hack/kind.sh down         delete the cluster and the rail networks
#   hack/kind.sh kubeconfig   print the path of the cluster's kubeconfig
#   hack/kind.sh status       print "up" if the cluster exists, "down" if not
#   hack/kind.sh load-image TARFILE [NODE...]   load a docker-archive into the nodes (default all)
#
# What it does, step by step:
#   1. kind (sigs.k8s.io/kind, KIND_VERSION in hack/versions.sh), built into the tool cache by
#      `hack/setup.sh kind` (`make kind` runs it); `kind create cluster` with kind's default CNI (kindnet) as the primary network.
#   2. Rails: `docker network create nezha-<name>-railK` (a /24 each) and `docker network connect`
#      of every node, in rail order, so rail K is interface eth<K+1> on every node: RailClass
#      hostInterface.name eth1, eth2, ... and macvlan NADs with that master. Cut a rail with
#      `docker exec NODE ip link set ethK down` or `docker network disconnect`.
#   3. Multus as the thin plugin (built from the Go module proxy like the local cluster's), copied
#      into every node with its kubeconfig (a ServiceAccount token), delegating eth0 to the
#      cluster network; the NetworkAttachmentDefinition CRD from its client module.
#   4. Whereabouts (cluster-wide IPAM, built the same way, same kubeconfig pattern) so one rail's
#      pods on different nodes get distinct addresses: examples/kind/ has RailClasses using it.
#   5. `kind load image-archive` of build/images/*.tar, then `helm install` of charts/nezha with
#      imagePullPolicy Never.
#
# Tunables (env, default): NEZHA_KIND_NAME (nezha), NEZHA_KIND_RAILS (2),
# NEZHA_KIND_NODE_IMAGE (empty: kind's default node image), NEZHA_KIND_RAIL_NET (172.31: rail K is
# 172.31.K.0/24), NEZHA_KIND_SANDBOX (0). NEZHA_KIND_SANDBOX=1 is for Nezha's own development
# sandbox only, which reaches no container registry and cannot start privileged containers
# unaided (hack/kind-sandbox/README.md): it builds a node image locally
# (hack/kind-sandbox/node-image.sh), points kubeadm at its preloaded images, and, since that image
# has no kindnet, sets up a static pod network from here (a ptp CNI config per node and routes to
# the other nodes' pod CIDRs). Never part of what users install.
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
# shellcheck source=hack/lib/docker-check.sh
source "$REPO/hack/lib/docker-check.sh"

NAME=${NEZHA_KIND_NAME:-nezha}
RAILS=${NEZHA_KIND_RAILS:-2}
NODE_IMAGE=${NEZHA_KIND_NODE_IMAGE:-}
RAIL_NET=${NEZHA_KIND_RAIL_NET:-172.31}
SANDBOX=${NEZHA_KIND_SANDBOX:-0}
KIND="$NEZHA_TOOLS_BIN/kind-$KIND_VERSION"
KUBECONFIG_PATH="$NEZHA_CACHE/kind/$NAME.kubeconfig"
HELM="$NEZHA_TOOLS_BIN/helm-$HELM_VERSION"

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

validate() {
  [[ $NAME =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]] || die "NEZHA_KIND_NAME: want a short DNS label, got '$NAME'"
  uint_in_range NEZHA_KIND_RAILS "$RAILS" 1 4
  [[ $RAIL_NET =~ ^[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "NEZHA_KIND_RAIL_NET: want the first two octets (A.B), got '$RAIL_NET'"
  [[ $SANDBOX =~ ^[01]$ ]] || die "NEZHA_KIND_SANDBOX: want 0 or 1, got '$SANDBOX'"
}

kc() { "$NEZHA_KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

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
  local args=(--wait 180s)
  [ -z "$NODE_IMAGE" ] || args=(--image "$NODE_IMAGE" "${args[@]}")
  if [ "$SANDBOX" = 1 ]; then
    # The sandbox node image preloads the control plane as nezha.local/* and has no kindnet:
    # kubeadm is told those names, and the pod network is set up by sandbox_pod_network (nodes
    # are NotReady until then, so kind cannot wait for them).
    cat >>"$config" <<EOF
networking:
  disableDefaultCNI: true
kubeadmConfigPatches:
  - |
    kind: ClusterConfiguration
    imageRepository: nezha.local
    etcd:
      local:
        imageTag: $ETCD_VERSION
    dns:
      imageTag: $COREDNS_VERSION
EOF
    args=(--image "$NODE_IMAGE")
  fi
  "$KIND" create cluster --name "$NAME" --config "$config" --kubeconfig "$KUBECONFIG_PATH" "${args[@]}"
}

# sandbox_pod_network: what kindnet does on a normal kind cluster, done once from the host: each
# node gets a ptp CNI config with its pod CIDR (the name kind's Multus setup delegates to) and a
# route to every other node's pod CIDR through that node's address on the kind network.
sandbox_pod_network() {
  local node cidr other ocidr oip
  for node in $(nodes); do
    cidr=$(kc get node "$node" -o jsonpath='{.spec.podCIDR}')
    [ -n "$cidr" ] || fail "up: node $node has no pod CIDR yet"
    docker exec -i "$node" sh -c 'cat > /etc/cni/net.d/10-kindnet.conflist' <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kindnet",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state", "routes": [{"dst": "0.0.0.0/0"}],
              "ranges": [[{"subnet": "$cidr"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    for other in $(nodes); do
      [ "$other" != "$node" ] || continue
      ocidr=$(kc get node "$other" -o jsonpath='{.spec.podCIDR}')
      oip=$(docker inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "$other")
      docker exec "$node" ip route replace "$ocidr" via "$oip"
    done
  done
  kc wait --for=condition=Ready node --all --timeout 180s >/dev/null
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
  node_plugin_identity multus <<'EOF'
  - apiGroups: ["k8s.cni.cncf.io"]
    resources: ["*"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["pods", "pods/status"]
    verbs: ["get", "update", "patch"]
EOF
  local node tmp
  tmp=$(mktemp -d)
  sa_kubeconfig multus >"$tmp/multus.kubeconfig"
  # The cluster network is embedded as Multus' delegate, read from each node (kindnet writes
  # its conflist with the node's pod CIDR). Not "clusterNetwork": <file>: Multus v4 keeps only
  # the fields it knows of a delegate loaded that way for DEL, so ptp's host-local IPAM lost its
  # ranges and every pod's sandbox teardown failed ("no IP ranges specified").
  for node in $(nodes); do
    docker exec "$node" cat /etc/cni/net.d/10-kindnet.conflist >"$tmp/cluster-network.conflist" ||
      fail "up: node $node has no /etc/cni/net.d/10-kindnet.conflist (is its pod network up?)"
    jq '{cniVersion: "1.0.0", name: "multus-cni-network", type: "multus",
         kubeconfig: "/etc/cni/net.d/multus.d/multus.kubeconfig", binDir: "/opt/cni/bin",
         delegates: [.]}' "$tmp/cluster-network.conflist" >"$tmp/00-multus.conf" ||
      fail "up: node $node's /etc/cni/net.d/10-kindnet.conflist is not JSON"
    docker exec "$node" mkdir -p /etc/cni/net.d/multus.d
    docker cp "$CLUSTER_BIN/multus-$MULTUS_VERSION" "$node:/opt/cni/bin/multus"
    docker cp "$tmp/multus.kubeconfig" "$node:/etc/cni/net.d/multus.d/multus.kubeconfig"
    docker cp "$tmp/00-multus.conf" "$node:/etc/cni/net.d/00-multus.conf"
  done
  rm -rf "$tmp"
}

# node_plugin_identity NAME: the ServiceAccount kube-system/NAME a node-side CNI plugin uses (see
# sa_kubeconfig), bound to ClusterRole nezha-kind-NAME whose rules (a YAML list) come on stdin,
# plus recording events, which every such plugin does.
node_plugin_identity() {
  local name=$1 rules
  rules=$(cat)
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: $name, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: nezha-kind-$name}
rules:
$rules
  - apiGroups: ["", "events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: nezha-kind-$name}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nezha-kind-$name}
subjects: [{kind: ServiceAccount, name: $name, namespace: kube-system}]
EOF
}

# sa_kubeconfig SERVICEACCOUNT: a kubeconfig (on stdout) for a kube-system ServiceAccount, with the
# API server's in-cluster name as seen from the nodes; node-side CNI plugins use it.
sa_kubeconfig() {
  local sa=$1 token ca
  token=$(kc -n kube-system create token "$sa" --duration 8760h)
  ca=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "https://$NAME-control-plane:6443", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: $sa, context: {cluster: kind, user: $sa}}]
current-context: $sa
EOF
}

# install_whereabouts: cluster-wide IPAM for the rails. host-local would hand out the same
# addresses on every node; whereabouts allocates from one pool in the API server. The CNI binary
# and its flat config go into every node, its CRDs and RBAC into the cluster.
install_whereabouts() {
  build_go_main whereabouts github.com/k8snetworkplumbingwg/whereabouts "$WHEREABOUTS_VERSION" \
    github.com/k8snetworkplumbingwg/whereabouts/cmd
  local dir crd node tmp
  dir=$(go mod download -json "github.com/k8snetworkplumbingwg/whereabouts@$WHEREABOUTS_VERSION" | jq -r .Dir) ||
    fail "up: downloading whereabouts $WHEREABOUTS_VERSION failed"
  for crd in ippools overlappingrangeipreservations nodeslicepools; do
    kc apply -f "$dir/doc/crds/whereabouts.cni.cncf.io_$crd.yaml" >/dev/null
  done
  node_plugin_identity whereabouts <<'EOF'
  - apiGroups: ["whereabouts.cni.cncf.io"]
    resources: ["ippools", "overlappingrangeipreservations", "nodeslicepools"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["*"]
  - apiGroups: [""]
    resources: ["pods", "nodes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["k8s.cni.cncf.io"]
    resources: ["network-attachment-definitions"]
    verbs: ["get", "list", "watch"]
EOF
  tmp=$(mktemp -d)
  sa_kubeconfig whereabouts >"$tmp/whereabouts.kubeconfig"
  cat >"$tmp/whereabouts.conf" <<'EOF'
{"datastore": "kubernetes",
 "kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"}}
EOF
  for node in $(nodes); do
    docker exec "$node" mkdir -p /etc/cni/net.d/whereabouts.d
    docker cp "$CLUSTER_BIN/whereabouts-$WHEREABOUTS_VERSION" "$node:/opt/cni/bin/whereabouts"
    docker cp "$tmp/whereabouts.kubeconfig" "$node:/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"
    docker cp "$tmp/whereabouts.conf" "$node:/etc/cni/net.d/whereabouts.d/whereabouts.conf"
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
  local why
  why=$(docker_problem) || fail "up: $why"
  require_tool go "install the Go toolchain go.mod names"
  require_cmd jq
  [ -x "$NEZHA_KUBE_BIN/kubectl" ] || fail "up: no kubectl in $NEZHA_KUBE_BIN (run: hack/setup.sh)"
  [ -x "$HELM" ] || fail "up: no helm at $HELM (run: hack/setup.sh)"
  [ -x "$KIND" ] || fail "up: no kind at $KIND (run: hack/setup.sh kind)"
  if [ "$SANDBOX" = 1 ] && [ -z "$NODE_IMAGE" ]; then
    NODE_IMAGE=$("$REPO/hack/kind-sandbox/node-image.sh") || fail "up: building the sandbox node image failed"
  fi
  "$KIND" get clusters 2>/dev/null | grep -qx "$NAME" || create_cluster
  [ "$SANDBOX" = 0 ] || sandbox_pod_network
  create_rails
  install_multus
  install_whereabouts
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

cluster_exists() { [ -x "$KIND" ] && "$KIND" get clusters 2>/dev/null | grep -qx "$NAME"; }

cmd_load_image() { # TARFILE [NODE...]
  local tar=$1 nodes
  shift
  [ -f "$tar" ] || fail "load-image: no such file: $tar"
  cluster_exists || fail "load-image: no kind cluster $NAME (run: $PROG up)"
  nodes=$(IFS=,; echo "$*")
  "$KIND" load image-archive "$tar" --name "$NAME" ${nodes:+--nodes "$nodes"}
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
validate
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  status) if cluster_exists; then echo up; else echo down; fi ;;
  load-image)
    [ $# -ge 1 ] || die "load-image: want a TARFILE argument (then optional node names)"
    cmd_load_image "$@"
    ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$cmd' (want up, down, kubeconfig, status or load-image)" ;;
esac
