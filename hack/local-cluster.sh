#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, without Docker or a registry:
#
#   hack/local-cluster.sh up                 build (cached) and start; waits for the node Ready
#   hack/local-cluster.sh down               stop everything and return the host to how `up` found it
#   hack/local-cluster.sh status             components, PIDs, node state (rc 1 degraded, 3 down)
#   hack/local-cluster.sh load-image TARFILE import a docker-archive tarball (hack/imagebuilder)
#   hack/local-cluster.sh kubeconfig         print the admin kubeconfig path
#   hack/local-cluster.sh env                print export lines: eval "$(hack/local-cluster.sh env)"
#   hack/local-cluster.sh build              only build/cache the binaries and the pause image (no root)
#
# What runs (all as root, each a plain process with its PID in $NEZHA_CLUSTER_DIR/pids):
#   etcd, kube-apiserver (127.0.0.1:$NEZHA_CLUSTER_API_PORT, static admin token), controller-manager,
#   scheduler, a private containerd (own config/root/state/socket; never the system one), the
#   kubelet, and CoreDNS serving cluster.local on the pod gateway 10.244.0.1 (headless Services
#   resolve from pods; there is no kube-proxy, so ClusterIPs do not route, except the
#   `kubernetes` Service 10.96.0.1:443, forwarded to the apiserver by hack/lib/apiserver-proxy.py
#   so in-cluster clients such as the operator work unchanged). Multus is the CNI:
#   eth0 from bridge + host-local on the pre-created bridge nzcbr0 (10.244.0.0/24), extra
#   interfaces from NetworkAttachmentDefinitions (CRD installed); host veths nzr0, nzr1, ... are
#   there to be macvlan masters ("rails"). Images: imported only (imagePullPolicy: Never).
#   Where Docker or a firewall drops forwarding (FORWARD policy DROP, br_netfilter), chain
#   NEZHA-LOCAL-CLUSTER accepts the pod bridge's traffic; `down` removes it.
#
# Tunables (env, default) are in hack/lib/cluster-env.sh: NEZHA_CLUSTER_DIR, NEZHA_CLUSTER_NODE,
# NEZHA_CLUSTER_RAILS, NEZHA_CLUSTER_RAIL_PREFIX, NEZHA_CLUSTER_CNI_PLUGINS, NEZHA_CLUSTER_API_PORT,
# NEZHA_CLUSTER_ETCD_PORT, NEZHA_CLUSTER_READY_TIMEOUT. Pitfalls this script works around: /work/shared/notes/local-cluster.md.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=local-cluster.sh
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"
# shellcheck source=hack/lib/cluster-env.sh
source "$REPO/hack/lib/cluster-env.sh"
# shellcheck source=hack/lib/cluster-build.sh
source "$REPO/hack/lib/cluster-build.sh"
# shellcheck source=hack/lib/cluster-config.sh
source "$REPO/hack/lib/cluster-config.sh"
# shellcheck source=hack/lib/cluster-host.sh
source "$REPO/hack/lib/cluster-host.sh"
# shellcheck source=hack/lib/cluster-procs.sh
source "$REPO/hack/lib/cluster-procs.sh"

KUBECTL="$NEZHA_KUBE_BIN/kubectl"
kc() { "$KUBECTL" --kubeconfig "$C_KUBECONFIG" "$@"; }
ctr_k8s() { ctr --address "$C_CONTAINERD_SOCK" --namespace k8s.io "$@"; }

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

started_at=$(date +%s)
elapsed() { echo "$(($(date +%s) - started_at))s"; }

# ---- up ---------------------------------------------------------------------------------------
start_etcd() {
  local peer=$((NEZHA_CLUSTER_ETCD_PORT + 10))
  cluster_start etcd "$NEZHA_KUBE_BIN/etcd" --name nezha --data-dir "$NEZHA_CLUSTER_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$NEZHA_CLUSTER_ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$NEZHA_CLUSTER_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "nezha=http://127.0.0.1:$peer" \
    --unsafe-no-fsync --log-level warn
  cluster_await etcd 30 "etcd healthy" curl -fsS "http://127.0.0.1:$NEZHA_CLUSTER_ETCD_PORT/health"
}

start_apiserver() {
  cluster_start kube-apiserver "$NEZHA_KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$NEZHA_CLUSTER_ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$NEZHA_CLUSTER_API_PORT" --advertise-address "$CLUSTER_NODE_IP" \
    --cert-dir "$C_PKI" --tls-cert-file "$C_PKI/apiserver.crt" --tls-private-key-file "$C_PKI/apiserver.key" \
    --client-ca-file "$C_PKI/ca.crt" --token-auth-file "$C_PKI/tokens.csv" --authorization-mode RBAC \
    --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --service-account-key-file "$C_PKI/sa.pub" --service-account-signing-key-file "$C_PKI/sa.key" \
    --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" --allow-privileged=true --profiling=false \
    --kubelet-preferred-address-types InternalIP \
    --enable-aggregator-routing=true
  # --enable-aggregator-routing: with no kube-proxy, admission webhooks (the operator's) are
  # reached through their Service's endpoints (pod IPs) instead of its ClusterIP.
  cluster_await kube-apiserver 60 "kube-apiserver ready" kc get --raw /readyz
  # In-cluster clients dial the `kubernetes` Service (10.96.0.1:443); without kube-proxy this
  # forwarder is what answers there.
  cluster_start apiserver-proxy /usr/bin/python3 "$REPO/hack/lib/apiserver-proxy.py" \
    "$CLUSTER_API_SERVICE_IP" 443 127.0.0.1 "$NEZHA_CLUSTER_API_PORT"
  cluster_await apiserver-proxy 10 "apiserver reachable at $CLUSTER_API_SERVICE_IP:443" \
    curl -fsS --cacert "$C_PKI/ca.crt" "https://$CLUSTER_API_SERVICE_IP/version"
}

start_containerd() {
  cluster_start containerd "$(command -v containerd)" --config "$NEZHA_CLUSTER_DIR/containerd/config.toml"
  cluster_await containerd 30 "containerd answering" ctr --address "$C_CONTAINERD_SOCK" version
  import_image "$CLUSTER_IMAGES/pause.tar"
}

start_controllers() {
  cluster_start kube-controller-manager "$NEZHA_KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$C_KUBECONFIG" --authentication-kubeconfig "$C_KUBECONFIG" --authorization-kubeconfig "$C_KUBECONFIG" \
    --bind-address 127.0.0.1 --secure-port 0 --cert-dir "$NEZHA_CLUSTER_DIR/controller-manager" \
    --service-account-private-key-file "$C_PKI/sa.key" --root-ca-file "$C_PKI/ca.crt" \
    --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" --leader-elect=false --cluster-name nezha-local
  cluster_start kube-scheduler "$NEZHA_KUBE_BIN/kube-scheduler" \
    --kubeconfig "$C_KUBECONFIG" --authentication-kubeconfig "$C_KUBECONFIG" --authorization-kubeconfig "$C_KUBECONFIG" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false
  cluster_start coredns "$CLUSTER_BIN/coredns-$COREDNS_VERSION" -conf "$NEZHA_CLUSTER_DIR/coredns/Corefile"
}

start_kubelet() {
  cluster_start kubelet "$NEZHA_KUBE_BIN/kubelet" --config "$NEZHA_CLUSTER_DIR/kubelet/config.yaml" \
    --kubeconfig "$C_KUBECONFIG" --root-dir "$NEZHA_CLUSTER_DIR/kubelet" --cert-dir "$NEZHA_CLUSTER_DIR/kubelet/pki" \
    --hostname-override "$NEZHA_CLUSTER_NODE" --node-ip "$CLUSTER_NODE_IP"
}

node_ready() {
  [ "$(kc get node "$NEZHA_CLUSTER_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

up_failed() {
  [ "$1" -eq 0 ] && return 0
  # Keep the logs for debugging in the cache (the state dir goes away with the teardown).
  local kept="$NEZHA_CACHE/cluster/failed-up-logs"
  rm -rf "$kept"
  mkdir -p "$(dirname "$kept")"
  cp -r "$C_LOGS" "$kept" 2>/dev/null || true
  log "up failed after $(elapsed); tearing down (component logs kept in $kept)"
  teardown
}

cmd_up() {
  require_root "$PROG up"
  cluster_validate_env
  cluster_validate_plugins
  require_cmd ip openssl jq curl containerd ctr runc go sysctl setsid base64
  [ ! -e "$NEZHA_CLUSTER_DIR" ] ||
    fail "up: $NEZHA_CLUSTER_DIR exists: a cluster is running or was not torn down; run: $PROG down"
  local l
  for l in $(cluster_owned_links); do
    ! ip link show "$l" >/dev/null 2>&1 ||
      fail "up: interface $l exists but $NEZHA_CLUSTER_DIR does not: another local cluster with a different NEZHA_CLUSTER_DIR, or a leftover (ip link del $l)"
  done
  cluster_build_all
  log "binaries ready ($(elapsed)); starting"

  # mkdir without -p is atomic: of two racing `up`s only one gets the state dir, and the loser
  # exits before its failure trap could tear down the winner's cluster.
  mkdir -p "$(dirname "$NEZHA_CLUSTER_DIR")"
  mkdir -m 700 "$NEZHA_CLUSTER_DIR" 2>/dev/null || fail "up: another up is using $NEZHA_CLUSTER_DIR"
  trap 'up_failed $?' EXIT
  cluster_snapshot_host
  cluster_net_up
  cluster_write_configs
  start_etcd
  start_apiserver
  start_containerd
  kc apply -f "$(cluster_nad_crd)" >/dev/null
  start_controllers
  start_kubelet
  local i
  for ((i = 0; i < NEZHA_CLUSTER_READY_TIMEOUT * 2; i++)); do
    node_ready && break
    for c in "${CLUSTER_COMPONENTS[@]}"; do cluster_check_alive "$c" || fail "up: $c died"; done
    sleep 0.5
  done
  node_ready || fail "up: node $NEZHA_CLUSTER_NODE not Ready after ${NEZHA_CLUSTER_READY_TIMEOUT}s (logs: $C_LOGS)"
  # Pods cannot be created before the service-account controller made the namespace's SA.
  cluster_wait 60 kc get serviceaccount default -n default || fail "up: no default ServiceAccount after 60s"
  trap - EXIT
  log "up: node $NEZHA_CLUSTER_NODE Ready in $(elapsed); use: eval \"\$($0 env)\""
}

# ---- down -------------------------------------------------------------------------------------
# drain_pods: let the kubelet stop every pod the normal way (CNI DEL, netns removed, mounts gone)
# before anything is killed. Controllers are stopped first so nothing recreates pods.
drain_pods() {
  cluster_pid kube-apiserver >/dev/null && cluster_pid kubelet >/dev/null || return 0
  cluster_stop kube-controller-manager kube-scheduler
  kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
  cluster_wait 60 bash -c "[ -z \"\$(\"$KUBECTL\" --kubeconfig \"$C_KUBECONFIG\" get pods -A -o name 2>/dev/null)\" ]" ||
    log "pods still present after 60s; killing what is left"
}

# kill_containers: whatever the kubelet did not stop (it died, or draining timed out).
kill_containers() {
  if cluster_pid containerd >/dev/null; then
    local t
    for t in $(ctr_k8s tasks ls -q 2>/dev/null); do
      ctr_k8s tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
  fi
  cluster_kill_cgroup_procs
}

teardown() {
  # Without a state dir there is nothing of ours to stop, and nothing recorded to restore: never
  # guess (another cluster with a different NEZHA_CLUSTER_DIR may own those interfaces).
  [ -d "$NEZHA_CLUSTER_DIR" ] || return 0
  local shared
  shared=$(cluster_shared_files)
  drain_pods
  cluster_stop kubelet coredns kube-scheduler kube-controller-manager
  kill_containers
  cluster_stop containerd
  local shims
  shims=$(cluster_shim_pids)
  # shellcheck disable=SC2086 # a list of pids
  [ -z "$shims" ] || kill -KILL $shims 2>/dev/null || true
  cluster_stop kube-apiserver apiserver-proxy
  cluster_stop etcd
  cluster_kill_cgroup_procs
  cluster_remove_cni_netns
  [ ! -d "$NEZHA_CLUSTER_DIR" ] || cluster_unmount_under "$NEZHA_CLUSTER_DIR"
  cluster_net_down
  cluster_restore_sysctls
  cluster_remove_cgroups
  # shellcheck disable=SC2086 # a list of paths without spaces
  [ -z "$shared" ] || rm -f $shared
  cluster_remove_hardcoded_paths
  rm -rf "$NEZHA_CLUSTER_DIR"
}

cmd_down() {
  require_root "$PROG down"
  cluster_validate_env
  teardown
  log "down: host restored ($(elapsed))"
}

# ---- the rest ---------------------------------------------------------------------------------
import_image() {
  local tarball=$1
  [ -f "$tarball" ] || fail "load-image: no such file: $tarball"
  cluster_pid containerd >/dev/null || fail "load-image: the cluster's containerd is not running (run: $PROG up)"
  # --no-unpack would leave the image unusable by the CRI until the first pod; unpack now.
  ctr_k8s images import "$tarball" >/dev/null || fail "load-image: ctr could not import $tarball (a docker-archive from hack/imagebuilder?)"
}

cmd_status() {
  cluster_validate_env
  if [ ! -d "$NEZHA_CLUSTER_DIR" ]; then
    echo "local cluster: down ($NEZHA_CLUSTER_DIR does not exist)"
    return 3
  fi
  local c pid rc=0
  echo "local cluster in $NEZHA_CLUSTER_DIR"
  for c in "${CLUSTER_COMPONENTS[@]}"; do
    if pid=$(cluster_pid "$c"); then
      printf '  %-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '  %-24s NOT RUNNING (log: %s)\n' "$c" "$C_LOGS/$c.log"
      rc=1
    fi
  done
  if node_ready; then echo "  node $NEZHA_CLUSTER_NODE: Ready"; else echo "  node $NEZHA_CLUSTER_NODE: not Ready"; rc=1; fi
  return $rc
}

cmd_env() {
  cat <<EOF
export KUBECONFIG=$C_KUBECONFIG
export NEZHA_KUBECTL=$KUBECTL
export NEZHA_CLUSTER_DIR=$NEZHA_CLUSTER_DIR
export NEZHA_CLUSTER_NODE=$NEZHA_CLUSTER_NODE
export NEZHA_CONTAINERD_ADDRESS=$C_CONTAINERD_SOCK
export NEZHA_CNI_BIN_DIR=$C_CNI_BIN
export NEZHA_CLUSTER_RAIL_IFACES=$(seq -s, -f "$NEZHA_CLUSTER_RAIL_PREFIX%g" 0 $((NEZHA_CLUSTER_RAILS - 1)))
export PATH=$NEZHA_KUBE_BIN:\$PATH
EOF
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  up | down | status | kubeconfig | env | build)
    [ $# -eq 0 ] || die "$cmd: unexpected argument '$1'"
    ;;
esac
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  load-image)
    [ $# -eq 1 ] || die "load-image: want exactly one TARFILE argument"
    require_root "$PROG load-image"
    cluster_validate_env
    import_image "$1"
    ;;
  kubeconfig) echo "$C_KUBECONFIG" ;;
  env) cmd_env ;;
  build)
    cluster_validate_env
    cluster_build_all
    log "build: binaries in $NEZHA_KUBE_BIN and $CLUSTER_BIN, images in $CLUSTER_IMAGES ($(elapsed))"
    ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$cmd' (want up, down, status, load-image, kubeconfig, env or build)" ;;
esac
