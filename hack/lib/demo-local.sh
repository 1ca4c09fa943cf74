# shellcheck shell=bash
# shellcheck disable=SC2034 # the platform_* functions set variables hack/lib/demo-steps.sh reads
# hack/demo.sh on the single-node local cluster (hack/local-cluster.sh): the platform_* functions
# hack/lib/demo-steps.sh calls. Its two rails are host veths nzr0/nzr1 that Multus gives pods as
# macvlans; both workers share the one node, so the demo shapes each worker's own rail
# interfaces and cuts the host end of rail 1 (what a pulled cable does to every pod on it).

LOCAL_CLUSTER="$REPO/hack/local-cluster.sh"
# Rail subnets of the demo's RailClasses (host-local IPAM is enough on one node; outside the
# cluster's pod and service ranges and the e2e's 10.70/10.71).
RAIL_SUBNETS=(10.80.0.0/24 10.81.0.0/24)

platform_name() { echo "the single-node local cluster (hack/local-cluster.sh)"; }

platform_prereqs() {
  require_root "$PROG (the local cluster, rail links and qdiscs)"
  require_cmd ip tc nsenter ctr
}

platform_up() {
  local rc=0
  "$LOCAL_CLUSTER" status >/dev/null 2>&1 || rc=$?
  case $rc in
    0) log "a local cluster is already up: using it (and leaving it up)" ;;
    3)
      BROUGHT_UP=1
      "$LOCAL_CLUSTER" up
      ;;
    *)
      log "a local cluster is half up (status rc $rc): taking it down first"
      "$LOCAL_CLUSTER" down
      BROUGHT_UP=1
      "$LOCAL_CLUSTER" up
      ;;
  esac
  eval "$("$LOCAL_CLUSTER" env)"
  ON_CLUSTER=1
  IFS=, read -ra RAIL_LINKS <<<"$NEZHA_CLUSTER_RAIL_IFACES"
  [ "${#RAIL_LINKS[@]}" -ge 2 ] || fail "the local cluster has ${#RAIL_LINKS[@]} rail(s); the demo needs 2 (NEZHA_CLUSTER_RAILS)"
  WORKER_NODES=("$NEZHA_CLUSTER_NODE")
}

platform_load_image() { "$LOCAL_CLUSTER" load-image "$1"; }

platform_helm_args() { HELM_ARGS=(--set "cni.binDir=$NEZHA_CNI_BIN_DIR"); }

# platform_rail_network I: the rail's host interface and its CNI IPAM (JSON) for the RailClass.
platform_rail_network() {
  RAIL_IFACE=${RAIL_LINKS[$1]}
  RAIL_IPAM="{\"type\": \"host-local\", \"ranges\": [[{\"subnet\": \"${RAIL_SUBNETS[$1]}\"}]]}"
}

# One node: nothing to spread.
platform_worker_affinity() { :; }

# container_pid POD CONTAINER: the host PID of a running container (containerd's task list).
container_pid() {
  local cid
  cid=$(kc get pod "$1" -n "$JOB_NS" -o json | jq -r --arg c "$2" \
    '.status.containerStatuses[]? | select(.name == $c and .state.running != null) | .containerID' | sed 's|^.*://||')
  [ -n "$cid" ] || return 1
  ctr --address "$NEZHA_CONTAINERD_ADDRESS" -n k8s.io task ls | awk -v id="$cid" '$1 == id { print $2 }'
}

# TBF on each worker's rail interfaces (nz0, nz1: the operator's names), as the rail test bed
# shapes its rails (the local cluster's rails are veths limited only by the CPU).
platform_shape() {
  local pod pid i
  for pod in "$JOB-0" "$JOB-1"; do
    if ! pid=$(container_pid "$pod" train) || [ -z "$pid" ]; then
      kc logs "$pod" -n "$JOB_NS" -c train --tail 15 >&2 || true
      fail "no running train container in $pod (exited at start? its log's last lines are above)"
    fi
    for i in 0 1; do
      nsenter -t "$pid" -n tc qdisc replace dev "nz$i" root tbf rate "${RATE_MBIT}mbit" burst "$TBF_BURST" latency 20ms
    done
  done
  log "rails shaped to $RATE_MBIT Mbit/s each in both workers"
}

# platform_sampler_start: starts hack/lib/demo-sample.py on rank 0's /metrics in the background,
# appending to $OUT/samples.jsonl, and prints its PID. The pod network is reachable from the host.
platform_sampler_start() {
  local ip
  ip=$(kc get pod "$JOB-0" -n "$JOB_NS" -o jsonpath='{.status.podIP}')
  "$PY" "$REPO/hack/lib/demo-sample.py" "http://$ip:$CONTROL_PORT/metrics" "$OUT/samples.jsonl" >/dev/null 2>&1 &
  echo $!
}

platform_cut() {
  CUT_NODE=$NEZHA_CLUSTER_NODE CUT_LINK=${RAIL_LINKS[1]}
  ip link set "$CUT_LINK" down
  CUT_DONE="ip link set $CUT_LINK down (the node's end of ${RAILS[1]})"
}

platform_restore() { ip link set "$CUT_LINK" up; }

platform_keep_hint() {
  echo "the cluster is up:   eval \"\$(hack/local-cluster.sh env)\"; kubectl get mrj,railclass,railnode"
  echo "take it down with:   hack/local-cluster.sh down"
}

platform_down() { "$LOCAL_CLUSTER" down; }

platform_failure_logs() {
  [ ! -d "${NEZHA_CLUSTER_DIR:-/nonexistent}/logs" ] || cp -r "$NEZHA_CLUSTER_DIR/logs" "$1/cluster-logs"
}

# The qdiscs went with the workers' pods; the cut link is set up by demo_exit.
platform_exit() { :; }
