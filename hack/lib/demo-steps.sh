# shellcheck shell=bash
# The steps of hack/demo.sh (the product demo). Sourced after its flags are parsed: REPO, PROG,
# KEEP, CLUSTER, SECONDS_TRAIN, CUT_AFTER, CUT_FOR, RATE_MBIT and OUT are set. What differs between
# clusters (bringing one up, loading images, the rails' interfaces and addresses, shaping, the cut)
# is in hack/lib/demo-$CLUSTER.sh as platform_* functions; the story is the same on both.

# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
HELM="$NEZHA_TOOLS_BIN/helm"
PY=/usr/bin/python3
JOB=demo-train
JOB_NS=default
RELEASE=nezha
RELEASE_NS=nezha-system
RAILS=(demo-rail0 demo-rail1)
CONTROL_PORT=9402

BROUGHT_UP=0    # this run started the cluster (so it takes it down)
ON_CLUSTER=0    # kubectl points at the demo's cluster (set once it is up)
CUT_LINK=""     # the rail link this run set down (so the exit trap sets it up again)
CUT_NODE=""     # the node it is on
CUT_DONE=""     # what the cut did, in words (platform_cut)
SAMPLER_PID=""  # the metrics sampler in the background (platform_sampler_start)
WORKER_NODES=() # the nodes the workers may run on (platform_up)
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
  platform_prereqs
  require_cmd jq awk
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
  step "1/7 cluster: $(platform_name)"
  platform_up
}

# ---- 2. images and chart ----------------------------------------------------------------------
demo_install() {
  step "2/7 images and helm install"
  local t
  for t in "${IMAGE_TARBALLS[@]}"; do
    platform_load_image "$t"
    log "loaded $(basename "$t")"
  done
  # What an interrupted earlier run may have left (foreground: the workers are gone too).
  if kc get crd multirailjobs.nezha.io >/dev/null 2>&1; then
    kc delete multirailjob "$JOB" -n "$JOB_NS" --ignore-not-found --cascade=foreground --wait=true >/dev/null
  fi
  # quarantine.failures=0: the demo cuts the same rail of the one node on every run; with
  # quarantine by evidence on (3 failures in 10 min), a few runs in a row would rightly quarantine
  # it and keep the next demo job off the only node.
  local HELM_ARGS
  platform_helm_args
  "$HELM" upgrade --install "$RELEASE" "$REPO/charts/nezha" -n "$RELEASE_NS" --create-namespace \
    --set image.pullPolicy=Never "${HELM_ARGS[@]}" \
    --set operator.quarantine.failures=0 --wait --timeout 5m
  kc get pods -n "$RELEASE_NS" -o wide
}

# ---- 3. rails ---------------------------------------------------------------------------------
railnode_rail_up() { # NODE RAIL
  [ "$(kc get railnode "$1" -o json | jq -r --arg r "$2" \
    '.status.rails[]? | select(.name == $r) | .operState')" = up ]
}

demo_rails() {
  step "3/7 a RailClass per rail"
  local i node expected=$RATE_MBIT
  [ "$RATE_MBIT" -gt 0 ] || expected=10000
  : >"$OUT/railclasses.yaml"
  for i in 0 1; do
    platform_rail_network "$i"
    cat >>"$OUT/railclasses.yaml" <<EOF
---
# Rail $i: a macvlan on each node's $RAIL_IFACE, addresses from $(jq -r .type <<<"$RAIL_IPAM"), chained
# with nezha-rail (this rail's own routing table in the pod).
apiVersion: nezha.io/v1alpha1
kind: RailClass
metadata:
  name: ${RAILS[$i]}
spec:
  transport: tcp
  hostInterface:
    name: $RAIL_IFACE
  expectedBandwidthMbps: $expected
  network:
    config: |
      {
        "cniVersion": "1.0.0",
        "name": "${RAILS[$i]}",
        "plugins": [
          {"type": "macvlan", "master": "$RAIL_IFACE", "mode": "bridge",
           "ipam": $RAIL_IPAM},
          {"type": "nezha-rail"}
        ]
      }
EOF
  done
  kc apply --server-side -f "$OUT/railclasses.yaml"
  for node in "${WORKER_NODES[@]}"; do
    for i in 0 1; do
      wait_until 120 "the RailNode $node to report ${RAILS[$i]} up" railnode_rail_up "$node" "${RAILS[$i]}"
    done
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

# sampled_training: the sampler has seen rank 0's runtime run operations.
sampled_training() {
  [ -s "$OUT/samples.jsonl" ] && jq -se 'map(.ops // 0) | max > 0' "$OUT/samples.jsonl" >/dev/null
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
$(platform_worker_affinity)
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
  if [ "$RATE_MBIT" -gt 0 ]; then
    # TBF as the rail test bed shapes its rails: a burst of 2 ms of traffic, at least 16 KiB.
    TBF_BURST=$((RATE_MBIT * 250))
    [ "$TBF_BURST" -ge 16384 ] || TBF_BURST=16384
    platform_shape
  fi
  # Rank 0's runtime metrics (/metrics on its control port) sampled twice a second.
  SAMPLER_PID=$(platform_sampler_start)
  wait_until 60 "rank 0's runtime to report training steps (sampled into $OUT/samples.jsonl)" sampled_training
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
  step "5/7 training on two rails, then rail ${RAILS[1]} cut"
  snapshot "before: training on both rails"
  log "training on both rails for ${CUT_AFTER}s"
  sleep "$CUT_AFTER"
  platform_cut
  T_CUT=$(now)
  log "$CUT_DONE"
  wait_until 60 "$JOB to turn Degraded" job_degraded
  snapshot "during: ${RAILS[1]} cut"
  echo
  echo "\$ kubectl get railnode $CUT_NODE"
  kc get railnode "$CUT_NODE"
  local left
  left=$(awk -v c="$T_CUT" -v f="$CUT_FOR" -v n="$(now)" 'BEGIN { s = c + f - n; print (s > 0 ? s : 0) }')
  sleep "$left"
  platform_restore
  CUT_LINK=""
  T_RESTORE=$(now)
  log "${RAIL_LINKS[1]} up again on $CUT_NODE"
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
    # By UID too: a kept cluster still has the events of earlier runs' jobs of the same name.
    kc get events -n "$JOB_NS" --field-selector "involvedObject.kind=MultiRailJob,involvedObject.name=$JOB,involvedObject.uid=$(job_field .metadata.uid)" \
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
    --arg r0 "${RAILS[0]}" --arg r1 "${RAILS[1]}" --arg node "$CUT_NODE" '{
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
  platform_failure_logs "$dir"
  log "failed after $(($(date +%s) - DEMO_START))s; what the cluster showed is in $dir"
}

demo_exit() {
  local rc=$1
  trap - EXIT
  [ -z "$CUT_LINK" ] || platform_restore || true
  [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null || true
  platform_exit
  [ "$rc" -eq 0 ] || [ "$ON_CLUSTER" = 0 ] || demo_failure_dump
  if [ "$KEEP" = 1 ]; then
    [ "$ON_CLUSTER" = 0 ] || {
      step "7/7 kept (--keep / DEMO_KEEP=1)"
      platform_keep_hint
    }
  elif [ "$BROUGHT_UP" = 1 ]; then
    step "7/7 cluster down"
    platform_down || rc=1
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
