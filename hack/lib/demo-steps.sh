# shellcheck shell=bash
# The steps of hack/demo.sh (the product demo). Sourced after its flags are parsed: REPO, PROG,
# KEEP, SECONDS_TRAIN, CUT_AFTER, CUT_FOR, RATE_MBIT and OUT are set.

LOCAL_CLUSTER="$REPO/hack/local-cluster.sh"
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
HELM="$NEZHA_TOOLS_BIN/helm"
PY=/usr/bin/python3
JOB=demo-train
JOB_NS=default
RELEASE=nezha
RELEASE_NS=nezha-system
RAILS=(demo-rail0 demo-rail1)
# Rail subnets of the demo's RailClasses (host-local IPAM; outside the cluster's pod and service
# ranges and the e2e's 10.70/10.71).
RAIL_SUBNETS=(10.80.0.0/24 10.81.0.0/24)
CONTROL_PORT=9402

BROUGHT_UP=0    # this run started the cluster (so it takes it down)
ON_CLUSTER=0    # kubectl points at the local cluster (set after its env is read)
CUT_LINK=""     # the host link this run set down (so the exit trap sets it up again)
SAMPLER_PID=""  # the metrics sampler in the background
DEMO_START=$(date +%s)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
now() { date +%s.%N; }
kc() { kubectl "$@"; }

# wait_until SECONDS WHAT COMMAND...: poll COMMAND every second until it succeeds; fail naming WHAT.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${timeout}s waiting for $what"
    sleep 1
  done
}

# ---- prerequisites --------------------------------------------------------------------------
demo_check_prereqs() {
  require_root "$PROG (the local cluster, rail links and qdiscs)"
  require_cmd ip tc nsenter jq curl ctr awk
  [ -x "$PY" ] || fail "missing $PY (Debian python3; run: make setup)"
  "$PY" -c 'import matplotlib' 2>/dev/null || fail "python3-matplotlib is missing (run: make setup)"
  [ -x "$HELM" ] || fail "helm is missing at $HELM (run: make setup)"
  local t
  IMAGE_TARBALLS=()
  for t in $("$REPO/hack/images.sh" --list); do
    [ -f "$t" ] || fail "image $t is missing (run: make images, or use make demo, which builds them)"
    IMAGE_TARBALLS+=("$t")
  done
  # The workers' image: torch, the nezha backend and examples/ (~3 GB; not in `make images`).
  t=$("$REPO/hack/images.sh" --list-train-example)
  [ -f "$t" ] || fail "image $t is missing (run: make images-train-example, or use make demo, which builds it)"
  IMAGE_TARBALLS+=("$t")
  IMAGE_TAG=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$REPO/charts/nezha/Chart.yaml")
  [ -n "$IMAGE_TAG" ] || fail "charts/nezha/Chart.yaml has no appVersion"
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  rm -f "$OUT"/{samples.jsonl,markers.json,story.txt,demo-throughput.png,rank0.log,rank1.log,final.jsonl}
}

# ---- 1. cluster -------------------------------------------------------------------------------
demo_cluster_up() {
  step "1/7 local cluster (hack/local-cluster.sh)"
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
  NODE=$NEZHA_CLUSTER_NODE
}

# ---- 2. images and chart ----------------------------------------------------------------------
demo_install() {
  step "2/7 images and helm install"
  local t
  for t in "${IMAGE_TARBALLS[@]}"; do
    "$LOCAL_CLUSTER" load-image "$t"
    log "loaded $(basename "$t")"
  done
  # What an interrupted earlier run may have left (foreground: the workers are gone too).
  if kc get crd multirailjobs.nezha.io >/dev/null 2>&1; then
    kc delete multirailjob "$JOB" -n "$JOB_NS" --ignore-not-found --cascade=foreground --wait=true >/dev/null
  fi
  # quarantine.failures=0: the demo cuts the same rail of the one node on every run; with
  # quarantine by evidence on (3 failures in 10 min), a few runs in a row would rightly quarantine
  # it and keep the next demo job off the only node.
  "$HELM" upgrade --install "$RELEASE" "$REPO/charts/nezha" -n "$RELEASE_NS" --create-namespace \
    --set image.pullPolicy=Never --set "cni.binDir=$NEZHA_CNI_BIN_DIR" \
    --set operator.quarantine.failures=0 --wait --timeout 5m
  kc get pods -n "$RELEASE_NS" -o wide
}

# ---- 3. rails ---------------------------------------------------------------------------------
railnode_rail_up() {
  [ "$(kc get railnode "$NODE" -o json | jq -r --arg r "$1" \
    '.status.rails[]? | select(.name == $r) | .operState')" = up ]
}

demo_rails() {
  step "3/7 a RailClass per rail"
  local i expected=$RATE_MBIT
  [ "$RATE_MBIT" -gt 0 ] || expected=10000
  : >"$OUT/railclasses.yaml"
  for i in 0 1; do
    cat >>"$OUT/railclasses.yaml" <<EOF
---
# Rail $i: a macvlan on the node's ${RAIL_LINKS[$i]}, addresses from host-local, chained with
# nezha-rail (this rail's own routing table in the pod).
apiVersion: nezha.io/v1alpha1
kind: RailClass
metadata:
  name: ${RAILS[$i]}
spec:
  transport: tcp
  hostInterface:
    name: ${RAIL_LINKS[$i]}
  expectedBandwidthMbps: $expected
  network:
    config: |
      {
        "cniVersion": "1.0.0",
        "name": "${RAILS[$i]}",
        "plugins": [
          {"type": "macvlan", "master": "${RAIL_LINKS[$i]}", "mode": "bridge",
           "ipam": {"type": "host-local", "ranges": [[{"subnet": "${RAIL_SUBNETS[$i]}"}]]}},
          {"type": "nezha-rail"}
        ]
      }
EOF
  done
  kc apply --server-side -f "$OUT/railclasses.yaml"
  for i in 0 1; do
    wait_until 120 "the RailNode $NODE to report ${RAILS[$i]} up" railnode_rail_up "${RAILS[$i]}"
  done
  kc get railclass "${RAILS[@]}"
}

# ---- 4. the job -------------------------------------------------------------------------------
job_field() { kc get multirailjob "$JOB" -n "$JOB_NS" -o json | jq -r "$1"; }
job_condition() { job_field ".status.conditions[]? | select(.type == \"$1\") | .status"; }
job_running_healthy() {
  [ "$(job_field .status.phase)" = Running ] && [ "$(job_condition RailsHealthy)" = True ] &&
    [ "$(job_condition Degraded)" != True ]
}
job_degraded() { [ "$(job_field .status.phase)" = Degraded ] && [ "$(job_condition RailsHealthy)" = False ]; }
job_finished() { [[ "$(job_field .status.phase)" =~ ^(Succeeded|Failed)$ ]]; }

# container_pid POD CONTAINER: the host PID of a running container (containerd's task list).
container_pid() {
  local cid
  cid=$(kc get pod "$1" -n "$JOB_NS" -o json | jq -r --arg c "$2" \
    '.status.containerStatuses[]? | select(.name == $c and .state.running != null) | .containerID' | sed 's|^.*://||')
  [ -n "$cid" ] || return 1
  ctr --address "$NEZHA_CONTAINERD_ADDRESS" -n k8s.io task ls | awk -v id="$cid" '$1 == id { print $2 }'
}

# metrics_show REGEX: rank 0's runtime metrics have a line matching REGEX.
metrics_show() {
  local text
  text=$(curl -fsS --max-time 2 "$METRICS_URL") || return 1
  grep -Eq "$1" <<<"$text"
}

demo_job() {
  step "4/7 a MultiRailJob training on both rails"
  local probe_env=""
  if [ "$RATE_MBIT" -gt 0 ]; then
    # The demo shapes the rails once the workers run, after the runtime's start-up bandwidth
    # probe would have measured them unshaped; start from the RailClasses' speeds instead.
    probe_env=$'\n              - {name: NEZHA_PROBE_BYTES, value: "0"}'
  fi
  cat >"$OUT/job.yaml" <<EOF
# Two workers, one per rank, each wired to both rails by the operator (Multus networks, NEZHA_*
# environment). Each trains examples/train_cnn.py (a small CNN, DDP) with torch.distributed
# backend "nezha" (the c10d backend in runtime/python) for $SECONDS_TRAIN s; rank and rendezvous
# come from the operator's NEZHA_* (no launcher), and the runtime's /status and /metrics are
# served from inside each torch process on port $CONTROL_PORT.
apiVersion: nezha.io/v1alpha1
kind: MultiRailJob
metadata:
  name: $JOB
  namespace: $JOB_NS
spec:
  rails: [${RAILS[0]}, ${RAILS[1]}]
  workers:
    replicas: 2
    template:
      spec:
        terminationGracePeriodSeconds: 1
        containers:
          - name: train
            image: nezha/train-example:$IMAGE_TAG
            imagePullPolicy: Never
            command: ["python3", "/opt/nezha/examples/train_cnn.py", "--backend", "nezha",
                      "--steps", "0", "--seconds", "$SECONDS_TRAIN", "--lr", "0.01",
                      "--clip-grad", "1", "--log-every", "250"]
            env:
              # Give up on a rail after 3 s without progress (default 30 s).
              - {name: NEZHA_IO_TIMEOUT_MS, value: "3000"}
              # Failovers and re-admissions (with their reasons) in the workers' logs.
              - {name: NEZHA_VERBOSE, value: "1"}$probe_env
  runtime:
    policy: adaptive
  failurePolicy:
    minHealthyRails: 1
    onRailLoss: ContinueDegraded
EOF
  kc apply --server-side -f "$OUT/job.yaml"
  wait_until 180 "$JOB to run on both rails (phase Running, RailsHealthy)" job_running_healthy
  POD_IP=$(kc get pod "$JOB-0" -n "$JOB_NS" -o jsonpath='{.status.podIP}')
  METRICS_URL="http://$POD_IP:$CONTROL_PORT/metrics"
  if [ "$RATE_MBIT" -gt 0 ]; then
    # TBF on each worker's rail interfaces (nz0, nz1: the operator's names), as the rail test bed
    # shapes its rails: burst of 2 ms of traffic, at least 16 KiB.
    local pod pid i burst=$((RATE_MBIT * 250))
    [ "$burst" -ge 16384 ] || burst=16384
    for pod in "$JOB-0" "$JOB-1"; do
      pid=$(container_pid "$pod" train) && [ -n "$pid" ] || {
        kc logs "$pod" -n "$JOB_NS" -c train --tail 15 >&2 || true
        fail "no running train container in $pod (exited at start? its log's last lines are above)"
      }
      for i in 0 1; do
        nsenter -t "$pid" -n tc qdisc replace dev "nz$i" root tbf rate "${RATE_MBIT}mbit" burst "$burst" latency 20ms
      done
    done
    log "rails shaped to $RATE_MBIT Mbit/s each in both workers"
  fi
  "$PY" "$REPO/hack/lib/demo-sample.py" "$METRICS_URL" "$OUT/samples.jsonl" &
  SAMPLER_PID=$!
  wait_until 60 "rank 0's runtime to report training steps ($METRICS_URL)" \
    metrics_show '^nezha_runtime_operations_total\{[^}]*\} [1-9]'
  T_TRAIN=$(now)
  kc get pods -n "$JOB_NS" -l "nezha.io/job-name=$JOB" -o wide 2>/dev/null || true
}

# ---- 5. the rail cut --------------------------------------------------------------------------
snapshot() {
  echo
  echo "\$ kubectl get mrj $JOB   # $1"
  kc get mrj "$JOB" -n "$JOB_NS"
}

demo_cut() {
  step "5/7 training on two rails, then rail ${RAILS[1]} cut on node $NODE"
  snapshot "before: training on both rails"
  log "training on both rails for ${CUT_AFTER}s"
  sleep "$CUT_AFTER"
  CUT_LINK=${RAIL_LINKS[1]}
  ip link set "$CUT_LINK" down
  T_CUT=$(now)
  log "ip link set $CUT_LINK down (the node's end of ${RAILS[1]})"
  wait_until 60 "$JOB to turn Degraded" job_degraded
  snapshot "during: ${RAILS[1]} cut"
  echo
  echo "\$ kubectl get railnode $NODE"
  kc get railnode "$NODE"
  local left
  left=$(awk -v c="$T_CUT" -v f="$CUT_FOR" -v n="$(now)" 'BEGIN { s = c + f - n; print (s > 0 ? s : 0) }')
  sleep "$left"
  ip link set "$CUT_LINK" up
  CUT_LINK=""
  T_RESTORE=$(now)
  log "ip link set ${RAIL_LINKS[1]} up"
  # The runtime re-admits the rail on its own once its end-to-end probe on it passes (the
  # sampler sees that in its metrics); the operator marks the job healthy when the node's agent
  # reports the link up and the workers' runtimes no longer report the rail failed.
  wait_until 90 "$JOB healthy again (Running, RailsHealthy)" job_running_healthy
  T_JOB_HEALTHY=$(now)
  snapshot "after: ${RAILS[1]} back"
}

# ---- 6. the story -----------------------------------------------------------------------------
demo_story() {
  step "6/7 the job finishes; the story"
  wait_until $((SECONDS_TRAIN + 120)) "$JOB to finish" job_finished
  T_END=$(now)
  kill "$SAMPLER_PID" 2>/dev/null || true
  wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=""
  local r
  for r in 0 1; do kc logs "$JOB-$r" -n "$JOB_NS" -c train >"$OUT/rank$r.log" 2>&1 || true; done
  # Every rank's last line of training: steps, final rank-averaged loss, parameter digest.
  sed -n 's/^FINAL //p' "$OUT/rank0.log" "$OUT/rank1.log" >"$OUT/final.jsonl"
  snapshot "at the end"
  local phase
  phase=$(job_field .status.phase)
  {
    echo
    echo "\$ kubectl get events --field-selector involvedObject.name=$JOB   # the job's events"
    kc get events -n "$JOB_NS" --field-selector "involvedObject.kind=MultiRailJob,involvedObject.name=$JOB" \
      --sort-by=.metadata.creationTimestamp -o custom-columns='TYPE:.type,REASON:.reason,MESSAGE:.message'
  }
  if grep -q '^nezha: rank 0: ' "$OUT/rank0.log"; then
    echo
    echo "\$ kubectl logs $JOB-0 | grep -v tune   # rank 0's runtime: failover and re-admission"
    grep '^nezha: rank 0: ' "$OUT/rank0.log" | grep -v ' tune ' | head -n 12
  fi
  echo
  echo "\$ kubectl logs $JOB-{0,1} | grep FINAL   # each rank's final loss and model digest"
  jq -r '"rank \(.rank): \(.steps) steps, loss \(.loss), parameters sha256 \(.params[0:16])..."' "$OUT/final.jsonl" || true
  jq -n --arg train "$T_TRAIN" --arg cut "$T_CUT" --arg restore "$T_RESTORE" --arg healthy "$T_JOB_HEALTHY" \
    --arg finish "$T_END" --arg phase "$phase" --arg rate "$RATE_MBIT" --arg link "${RAIL_LINKS[1]}" \
    --arg r0 "${RAILS[0]}" --arg r1 "${RAILS[1]}" --arg node "$NODE" '{
      train: ($train | tonumber), cut: ($cut | tonumber), restore: ($restore | tonumber),
      job_healthy: ($healthy | tonumber), end: ($finish | tonumber), phase: $phase,
      rate_mbit: ($rate | tonumber), cut_link: $link, cut_rail: $r1, rails: [$r0, $r1], node: $node}' \
    >"$OUT/markers.json"
  echo
  local story_rc=0
  "$PY" "$REPO/hack/lib/demo-story.py" --samples "$OUT/samples.jsonl" --markers "$OUT/markers.json" \
    --png "$OUT/demo-throughput.png" | tee "$OUT/story.txt" || story_rc=$?
  [ "$phase" = Succeeded ] || fail "$JOB ended $phase (rank 0's log: $OUT/rank0.log)"
  # The ranks trained the same steps to the same loss and bit-identical models, through the cut.
  [ "$(wc -l <"$OUT/final.jsonl")" -eq 2 ] || fail "want a FINAL line from both ranks in $OUT/rank{0,1}.log"
  [ "$(jq -c '[.steps, .loss, .params]' "$OUT/final.jsonl" | sort -u | wc -l)" -eq 1 ] ||
    fail "the ranks disagree at the end: $(tr '\n' ' ' <"$OUT/final.jsonl")"
  [ "$story_rc" -ne 3 ] || fail "the runtime did not re-admit ${RAILS[1]} after the cut (rank 0's log: $OUT/rank0.log)"
  [ "$story_rc" -eq 0 ] || fail "demo-story.py failed (rc $story_rc)"
}

# ---- exit -------------------------------------------------------------------------------------
demo_failure_dump() {
  local dir="$OUT/failure"
  mkdir -p "$dir"
  kc get multirailjob "$JOB" -n "$JOB_NS" -o yaml >"$dir/job.yaml" 2>&1 || true
  kc get pods -A -o wide >"$dir/pods.txt" 2>&1 || true
  kc get events -A --sort-by=.metadata.creationTimestamp >"$dir/events.txt" 2>&1 || true
  local r
  for r in 0 1; do kc logs "$JOB-$r" -n "$JOB_NS" -c train >"$dir/rank$r.log" 2>&1 || true; done
  kc logs -n "$RELEASE_NS" deployment/nezha-operator >"$dir/operator.log" 2>&1 || true
  [ ! -d "${NEZHA_CLUSTER_DIR:-/nonexistent}/logs" ] || cp -r "$NEZHA_CLUSTER_DIR/logs" "$dir/cluster-logs"
  log "failed after $(($(date +%s) - DEMO_START))s; what the cluster showed is in $dir"
}

demo_exit() {
  local rc=$1
  trap - EXIT
  [ -z "$CUT_LINK" ] || ip link set "$CUT_LINK" up || true
  [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null || true
  [ "$rc" -eq 0 ] || [ "$ON_CLUSTER" = 0 ] || demo_failure_dump
  if [ "$KEEP" = 1 ]; then
    [ "$ON_CLUSTER" = 0 ] || {
      step "7/7 kept (--keep / DEMO_KEEP=1)"
      echo "the cluster is up:   eval \"\$(hack/local-cluster.sh env)\"; kubectl get mrj,railclass,railnode"
      echo "take it down with:   hack/local-cluster.sh down"
    }
  elif [ "$BROUGHT_UP" = 1 ]; then
    step "7/7 cluster down"
    "$LOCAL_CLUSTER" down || rc=1
  elif [ "$ON_CLUSTER" = 1 ]; then
    step "7/7 cleaning up (the cluster was up before the demo: left up)"
    kc delete multirailjob "$JOB" -n "$JOB_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  [ "$rc" -ne 0 ] || echo "demo done in $(($(date +%s) - DEMO_START))s; story: $OUT/story.txt; plot: $OUT/demo-throughput.png"
  exit "$rc"
}

demo_main() {
  demo_check_prereqs
  trap 'demo_exit $?' EXIT
  demo_cluster_up
  demo_install
  demo_rails
  demo_job
  demo_cut
  demo_story
}
