# shellcheck shell=bash
# shellcheck disable=SC2034 # variables used by the scripts that source this file
# Tunables and derived paths of the local single-node cluster (hack/local-cluster.sh). Every knob
# is declared here once, with its environment variable and default. Source after versions.sh.

# Where the running cluster keeps its state: configs, PKI, etcd data, containerd root/state,
# kubelet root, logs and PIDs. Removed by `down`. Keep the path short: unix sockets live in it.
NEZHA_CLUSTER_DIR=${NEZHA_CLUSTER_DIR:-/var/lib/nezha-cluster}
# Node name registered by the kubelet.
NEZHA_CLUSTER_NODE=${NEZHA_CLUSTER_NODE:-nezha-local}
# Number of host-side "rail" veths made for macvlan NetworkAttachmentDefinitions, and their
# name prefix: rail K is ${PREFIX}K (what NADs use as master) with peer ${PREFIX}Kp.
NEZHA_CLUSTER_RAILS=${NEZHA_CLUSTER_RAILS:-2}
NEZHA_CLUSTER_RAIL_PREFIX=${NEZHA_CLUSTER_RAIL_PREFIX:-nzr}
# Extra CNI plugin binaries (comma-separated paths, e.g. a freshly built nezha-rail) linked into
# the cluster's CNI bin dir next to the Debian reference plugins and Multus, under their own
# base names, so NetworkAttachmentDefinitions can use them as "type".
NEZHA_CLUSTER_CNI_PLUGINS=${NEZHA_CLUSTER_CNI_PLUGINS:-}
# Ports on 127.0.0.1, away from the well-known ones so a system Kubernetes or envtest never
# collides with ours.
NEZHA_CLUSTER_API_PORT=${NEZHA_CLUSTER_API_PORT:-16443}
NEZHA_CLUSTER_ETCD_PORT=${NEZHA_CLUSTER_ETCD_PORT:-23790}
# Seconds `up` waits for the node to become Ready.
NEZHA_CLUSTER_READY_TIMEOUT=${NEZHA_CLUSTER_READY_TIMEOUT:-120}
# Seconds `down` gives components after SIGTERM before SIGKILL.
CLUSTER_STOP_GRACE=10

# Fixed addressing (documented in local-cluster.sh's header). The pod bridge's gateway address
# is also where CoreDNS listens, so pods reach DNS without kube-proxy.
CLUSTER_POD_CIDR=10.244.0.0/24
CLUSTER_POD_GATEWAY=10.244.0.1
CLUSTER_SERVICE_CIDR=10.96.0.0/16
# The `kubernetes` Service IP: a local address on the pod bridge, served by apiserver-proxy.py.
CLUSTER_API_SERVICE_IP=10.96.0.1
CLUSTER_NODE_IP=10.250.0.1
CLUSTER_DOMAIN=cluster.local
# Root-namespace interfaces the cluster owns (names share the nzc prefix).
CLUSTER_POD_BRIDGE=nzcbr0
CLUSTER_NODE_VETH=nzcnode0 # carries the node IP (the kubelet refuses a loopback node IP)
CLUSTER_NODE_VETH_PEER=nzcnode1
# The sandbox image: a static Go binary (hack/imagebuilder/pause) packed by hack/imagebuilder.
CLUSTER_PAUSE_IMAGE=nezha.local/pause:1

# Derived paths.
CLUSTER_BIN="$NEZHA_CACHE/cluster/bin"    # multus, coredns, pause (versioned, cached)
CLUSTER_IMAGES="$NEZHA_CACHE/cluster/images" # image tarballs built for the cluster
C_PKI="$NEZHA_CLUSTER_DIR/pki"
C_LOGS="$NEZHA_CLUSTER_DIR/logs"
C_PIDS="$NEZHA_CLUSTER_DIR/pids"
C_SNAPSHOT="$NEZHA_CLUSTER_DIR/host-before" # host state recorded by `up`, restored by `down`
C_KUBECONFIG="$NEZHA_CLUSTER_DIR/admin.kubeconfig"
C_CONTAINERD_SOCK="$NEZHA_CLUSTER_DIR/containerd.sock"
C_CNI_BIN="$NEZHA_CLUSTER_DIR/cni/bin"
C_CNI_CONF="$NEZHA_CLUSTER_DIR/cni/net.d"
C_API_URL="https://127.0.0.1:$NEZHA_CLUSTER_API_PORT"

# Paths that Kubernetes, containerd, runc or CNI hard-code regardless of our configuration.
# `up` records which of them existed; `down` removes the ones that did not (deepest first).
CLUSTER_HARDCODED_PATHS=(
  /var/lib/kubelet/device-plugins/kubelet.sock
  /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  /var/lib/kubelet/device-plugins
  /var/lib/kubelet
  /var/log/containers
  /var/log/pods
  /run/containerd/s
  /run/containerd
  /var/lib/cni/results
  /var/lib/cni/multus
  /var/lib/cni/networks
  /var/lib/cni
)

# Kernel settings the kubelet rewrites at start (setupKernelTunables); saved and restored.
CLUSTER_KUBELET_SYSCTLS=(
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
)

# Components, in start order (status lists them in this order).
CLUSTER_COMPONENTS=(etcd kube-apiserver apiserver-proxy containerd kube-controller-manager kube-scheduler coredns kubelet)

cluster_validate_env() {
  uint_in_range NEZHA_CLUSTER_RAILS "$NEZHA_CLUSTER_RAILS" 0 8
  uint_in_range NEZHA_CLUSTER_API_PORT "$NEZHA_CLUSTER_API_PORT" 1024 65535
  uint_in_range NEZHA_CLUSTER_ETCD_PORT "$NEZHA_CLUSTER_ETCD_PORT" 1024 65524
  uint_in_range NEZHA_CLUSTER_READY_TIMEOUT "$NEZHA_CLUSTER_READY_TIMEOUT" 1 3600
  [[ $NEZHA_CLUSTER_RAIL_PREFIX =~ ^[a-z][a-z0-9]{0,9}$ ]] ||
    die "NEZHA_CLUSTER_RAIL_PREFIX: want 1-10 characters [a-z0-9] starting with a letter, got '$NEZHA_CLUSTER_RAIL_PREFIX'"
  [[ $NEZHA_CLUSTER_NODE =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
    die "NEZHA_CLUSTER_NODE: want a DNS label, got '$NEZHA_CLUSTER_NODE'"
  case "$NEZHA_CLUSTER_DIR" in
    /*) ;;
    *) die "NEZHA_CLUSTER_DIR: want an absolute path, got '$NEZHA_CLUSTER_DIR'" ;;
  esac
  # A unix socket path must fit in sun_path (108 bytes) with room for containerd's suffixes.
  [ ${#C_CONTAINERD_SOCK} -le 90 ] || die "NEZHA_CLUSTER_DIR: too long for a unix socket path: '$NEZHA_CLUSTER_DIR'"
}

# cluster_validate_plugins: only `up` needs the plugin files (a missing one must not block `down`).
cluster_validate_plugins() {
  local plugin
  for plugin in ${NEZHA_CLUSTER_CNI_PLUGINS//,/ }; do
    [[ $plugin == /* ]] || die "NEZHA_CLUSTER_CNI_PLUGINS: want absolute paths, got '$plugin'"
    { [ -f "$plugin" ] && [ -x "$plugin" ]; } || die "NEZHA_CLUSTER_CNI_PLUGINS: '$plugin' is not an executable file"
  done
}
