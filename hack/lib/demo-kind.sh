# shellcheck shell=bash
# shellcheck disable=SC2034 # the platform_* functions set variables hack/lib/demo-steps.sh reads
# hack/demo.sh on a 3-node kind cluster (hack/kind.sh): the platform_* functions
# hack/lib/demo-steps.sh calls. Rails are Docker networks, eth1/eth2 on every node; pods get
# macvlans on them with whereabouts addresses (one pool per rail for the whole cluster). The two
# workers run on different nodes, so rail traffic crosses real node boundaries: each node's rail
# interfaces are shaped, and rail 1 is cut on the node of rank 1 (`ip link set eth2 down` inside
# it: what a pulled cable does to that node).

KIND_SH="$REPO/hack/kind.sh"
# The rail networks' address plan (hack/kind.sh: rail K is $NEZHA_KIND_RAIL_NET.K.0/24, Docker
# hands out the start of it to the gateway and the nodes).
KIND_RAIL_NET=${NEZHA_KIND_RAIL_NET:-172.31}

platform_name() { echo "a 3-node kind cluster (hack/kind.sh)"; }

platform_prereqs() {
  local why
  why=$(docker_problem) || fail "kind needs Docker: $why (or use --cluster local)"
  # What hack/kind.sh needs beyond `make demo`'s `hack/setup.sh cluster` (kind itself; with
  # NEZHA_KIND_SANDBOX=1 the node image's tools). Idempotent: only checks once installed.
  "$REPO/hack/setup.sh" kind
}

kind_exec() { docker exec "$@"; }

platform_up() {
  # hack/kind.sh up is idempotent: it reuses a cluster of that name and (re)installs the rest.
  if [ "$("$KIND_SH" status)" = up ]; then
    log "a kind cluster is already up: using it (and leaving it up)"
  else
    BROUGHT_UP=1
  fi
  "$KIND_SH" up
  export KUBECONFIG PATH="$NEZHA_KUBE_BIN:$PATH"
  KUBECONFIG=$("$KIND_SH" kubeconfig)
  ON_CLUSTER=1
  mapfile -t WORKER_NODES < <(kc get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  [ "${#WORKER_NODES[@]}" -ge 2 ] || fail "the kind cluster has ${#WORKER_NODES[@]} worker node(s); the demo needs 2"
  RAIL_LINKS=(eth1 eth2)
}

# Only the worker nodes run training pods (the train image is ~3 GB).
platform_load_image() { "$KIND_SH" load-image "$1" "${WORKER_NODES[@]}"; }

platform_helm_args() { HELM_ARGS=(); }

platform_rail_network() {
  RAIL_IFACE=${RAIL_LINKS[$1]}
  RAIL_IPAM="{\"type\": \"whereabouts\", \"range\": \"$KIND_RAIL_NET.$1.0/24\", \"range_start\": \"$KIND_RAIL_NET.$1.64\", \"range_end\": \"$KIND_RAIL_NET.$1.250\"}"
}

# The two workers on two different nodes.
platform_worker_affinity() {
  cat <<EOF
        affinity:
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector: {matchLabels: {nezha.io/job-name: $JOB}}
                topologyKey: kubernetes.io/hostname
EOF
}

# TBF on both rail interfaces of each worker's node: the pods' macvlans send through them.
platform_shape() {
  local node i
  for node in "${WORKER_NODES[@]}"; do
    for i in 0 1; do
      kind_exec "$node" tc qdisc replace dev "${RAIL_LINKS[$i]}" root tbf rate "${RATE_MBIT}mbit" burst "$TBF_BURST" latency 20ms
    done
  done
  log "rails shaped to $RATE_MBIT Mbit/s each on both worker nodes"
}

platform_unshape() {
  local node i
  for node in "${WORKER_NODES[@]}"; do
    for i in 0 1; do kind_exec "$node" tc qdisc del dev "${RAIL_LINKS[$i]}" root 2>/dev/null || true; done
  done
}

# platform_sampler_start (see demo-local.sh): pod addresses are not reachable from the host on
# kind, and the control endpoint listens on the pod's address (not on localhost, where `kubectl
# port-forward` connects), so the sampler runs inside rank 0's container (its image has python3)
# and streams its JSON lines back through `kubectl exec`. Sample times are the node's clock,
# which is the host's (kind nodes are containers).
platform_sampler_start() {
  local ip
  ip=$(kc get pod "$JOB-0" -n "$JOB_NS" -o jsonpath='{.status.podIP}')
  kc exec -n "$JOB_NS" "$JOB-0" -c train -- python3 -c "$(cat "$REPO/hack/lib/demo-sample.py")" \
    "http://$ip:$CONTROL_PORT/metrics" /dev/stdout >>"$OUT/samples.jsonl" 2>"$OUT/sampler.log" &
  echo $!
}

platform_cut() {
  CUT_NODE=$(kc get pod "$JOB-1" -n "$JOB_NS" -o jsonpath='{.spec.nodeName}')
  CUT_LINK=${RAIL_LINKS[1]}
  kind_exec "$CUT_NODE" ip link set "$CUT_LINK" down
  CUT_DONE="docker exec $CUT_NODE ip link set $CUT_LINK down (${RAILS[1]} on rank 1's node)"
}

platform_restore() { kind_exec "$CUT_NODE" ip link set "$CUT_LINK" up; }

platform_keep_hint() {
  echo "the cluster is up:   export KUBECONFIG=$KUBECONFIG; kubectl get mrj,railclass,railnode"
  echo "take it down with:   hack/kind.sh down"
}

platform_down() { "$KIND_SH" down; }

platform_failure_logs() { cp "$OUT/sampler.log" "$1/" 2>/dev/null || true; }

platform_exit() { [ "$ON_CLUSTER" = 0 ] || platform_unshape; }
