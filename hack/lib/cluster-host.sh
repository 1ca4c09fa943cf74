# shellcheck shell=bash
# The local cluster's footprint on the host, and how `down` erases it: a snapshot of what was
# there before `up` (sysctls the kubelet rewrites, hard-coded paths, cgroups, cni-* netns), the
# root-namespace interfaces the cluster owns, and the cleanup that returns the host to the
# snapshot. Needs common.sh and cluster-env.sh.

# ---- snapshot ---------------------------------------------------------------------------------
cluster_snapshot_host() {
  mkdir -p "$C_SNAPSHOT"
  local s p
  for s in "${CLUSTER_KUBELET_SYSCTLS[@]}"; do
    echo "$s=$(sysctl -n "$s")"
  done >"$C_SNAPSHOT/sysctl"
  for p in "${CLUSTER_HARDCODED_PATHS[@]}" /run/netns; do
    [ ! -e "$p" ] || echo "$p"
  done >"$C_SNAPSHOT/paths"
  cluster_kubepods_cgroups >"$C_SNAPSHOT/cgroups"
  cluster_cni_netns >"$C_SNAPSHOT/netns"
}

# The kubelet's (cgroupfs driver) pod cgroups: kubepods in every v1 hierarchy and in v2.
cluster_kubepods_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ ! -d "$d" ] || echo "$d"
  done
}

cluster_cni_netns() {
  local n
  for n in /run/netns/cni-*; do
    [ ! -e "$n" ] || echo "$n"
  done
}

# ---- network ----------------------------------------------------------------------------------
# cluster_net_up: the node-IP veth, the pod bridge with the gateway address (where CoreDNS
# listens) and the `kubernetes` Service IP (where apiserver-proxy.py listens), the rail veths
# that macvlan NADs use as masters, and the pod bridge's ACCEPT rules (cluster_firewall_up).
# Nothing else in the root namespace changes: no routes beyond these interfaces' own, no
# forwarding sysctl, no other iptables rule.
cluster_net_up() {
  ip link add "$CLUSTER_NODE_VETH" type veth peer name "$CLUSTER_NODE_VETH_PEER"
  ip addr add "$CLUSTER_NODE_IP/32" dev "$CLUSTER_NODE_VETH"
  ip link set "$CLUSTER_NODE_VETH_PEER" up
  ip link set "$CLUSTER_NODE_VETH" up
  ip link add "$CLUSTER_POD_BRIDGE" type bridge stp_state 0 forward_delay 0
  ip addr add "$CLUSTER_POD_GATEWAY/${CLUSTER_POD_CIDR#*/}" dev "$CLUSTER_POD_BRIDGE"
  ip addr add "$CLUSTER_API_SERVICE_IP/32" dev "$CLUSTER_POD_BRIDGE"
  ip link set "$CLUSTER_POD_BRIDGE" up
  local k
  for ((k = 0; k < NEZHA_CLUSTER_RAILS; k++)); do
    ip link add "$NEZHA_CLUSTER_RAIL_PREFIX$k" type veth peer name "${NEZHA_CLUSTER_RAIL_PREFIX}${k}p"
    ip link set "${NEZHA_CLUSTER_RAIL_PREFIX}${k}p" up
    ip link set "$NEZHA_CLUSTER_RAIL_PREFIX$k" up
  done
  cluster_firewall_up
}

# Hosts where Docker (or a firewall) set the iptables FORWARD policy to DROP: Docker also loads
# br_netfilter, so frames bridged between two pods on the pod bridge pass FORWARD too, and are
# dropped (a worker never reaches rank 0). Like a CNI's bridge/firewall plugins, the cluster adds
# explicit ACCEPT rules for its own bridge and pod CIDR, in a chain of its own jumped to from the
# top of FORWARD, and `down` removes both. The policy itself is never touched. Hosts without
# iptables have no such firewall either.
CLUSTER_FW_CHAIN=NEZHA-LOCAL-CLUSTER
cluster_fw_jump=(-m comment --comment "nezha local cluster" -j "$CLUSTER_FW_CHAIN")
cluster_firewall_up() {
  command -v iptables >/dev/null || { log "no iptables: skipping the pod bridge's FORWARD rules"; return 0; }
  iptables -w -N "$CLUSTER_FW_CHAIN" 2>/dev/null || iptables -w -F "$CLUSTER_FW_CHAIN"
  iptables -w -A "$CLUSTER_FW_CHAIN" -i "$CLUSTER_POD_BRIDGE" -s "$CLUSTER_POD_CIDR" -j ACCEPT
  iptables -w -A "$CLUSTER_FW_CHAIN" -o "$CLUSTER_POD_BRIDGE" -d "$CLUSTER_POD_CIDR" -j ACCEPT
  iptables -w -C FORWARD "${cluster_fw_jump[@]}" 2>/dev/null || iptables -w -I FORWARD 1 "${cluster_fw_jump[@]}"
}

cluster_firewall_down() {
  command -v iptables >/dev/null || return 0
  while iptables -w -C FORWARD "${cluster_fw_jump[@]}" 2>/dev/null; do
    iptables -w -D FORWARD "${cluster_fw_jump[@]}"
  done
  if iptables -w -S "$CLUSTER_FW_CHAIN" >/dev/null 2>&1; then
    iptables -w -F "$CLUSTER_FW_CHAIN"
    iptables -w -X "$CLUSTER_FW_CHAIN"
  fi
}

cluster_owned_links() {
  echo "$CLUSTER_NODE_VETH" "$CLUSTER_POD_BRIDGE"
  local k
  for ((k = 0; k < 8; k++)); do echo "$NEZHA_CLUSTER_RAIL_PREFIX$k"; done
}

cluster_net_down() {
  local l
  # Pod veths still on the bridge (their pods were killed, not deleted through CNI): delete them
  # now, because the kernel removes them only asynchronously after their netns is gone.
  if ip link show "$CLUSTER_POD_BRIDGE" >/dev/null 2>&1; then
    for l in $(ip -o link show master "$CLUSTER_POD_BRIDGE" | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link del "$l" 2>/dev/null || true
    done
  fi
  for l in $(cluster_owned_links); do
    if ip link show "$l" >/dev/null 2>&1; then ip link del "$l"; fi
  done
  cluster_firewall_down
}

# ---- cleanup ----------------------------------------------------------------------------------
# cluster_unmount_under DIR: every mount at or below DIR, deepest first (overlay rootfs, shm,
# kubelet tmpfs volumes, netns bind mounts).
cluster_unmount_under() {
  local dir=$1 m
  # mountinfo field 5 is the mount point (spaces escaped as \040; our paths have none).
  awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}

# cluster_kill_cgroup_procs: processes still in the kubelet's pod cgroups are containers of this
# cluster whose shim died; nothing else lives there.
cluster_kill_cgroup_procs() {
  local cg pids
  [ -f "$C_SNAPSHOT/cgroups" ] || return 0
  for cg in $(cluster_kubepods_cgroups); do
    grep -qxF "$cg" "$C_SNAPSHOT/cgroups" && continue
    pids=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    # shellcheck disable=SC2086 # a list of pids
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
}

cluster_remove_cgroups() {
  local cg
  [ -f "$C_SNAPSHOT/cgroups" ] || return 0
  for cg in $(cluster_kubepods_cgroups); do
    grep -qxF "$cg" "$C_SNAPSHOT/cgroups" && continue
    # cgroup directories are removed with rmdir, leaves first. A killed container stays in its
    # cgroup until reaped, and PID 1 here reaps orphans only about once a second: retry a while.
    local i
    for ((i = 0; i < 50; i++)); do
      find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [ -d "$cg" ] || break
      sleep 0.2
    done
    [ ! -d "$cg" ] || log "cgroup $cg still busy after 10s; left in place"
  done
}

cluster_remove_cni_netns() {
  local n
  [ -f "$C_SNAPSHOT/netns" ] || return 0
  for n in $(cluster_cni_netns); do
    grep -qxF "$n" "$C_SNAPSHOT/netns" && continue
    ip netns del "$(basename "$n")" 2>/dev/null || { umount "$n" 2>/dev/null; rm -f "$n"; }
  done
}

cluster_restore_sysctls() {
  [ -f "$C_SNAPSHOT/sysctl" ] || return 0
  local line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    sysctl -q -w "$line" >/dev/null || log "could not restore sysctl $line"
  done <"$C_SNAPSHOT/sysctl"
}

# cluster_shared_files: this cluster's files inside hard-coded directories that may be shared
# (they stay when they existed before `up`): CNI result caches of our sandboxes, the kubelet's
# log symlinks into our state dir, our shims' sockets. Must run before the state dir goes, and
# before shims are killed (their task dirs name the sockets).
cluster_shared_files() {
  local sandbox id f
  for sandbox in "$NEZHA_CLUSTER_DIR"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*; do
    [ -d "$sandbox" ] || continue
    id=$(basename "$sandbox")
    for f in /var/lib/cni/results/*-"$id"-*; do [ ! -e "$f" ] || echo "$f"; done
  done
  local target pod_dir
  for f in /var/log/containers/*; do
    [ -L "$f" ] || continue
    target=$(readlink "$f")
    if [[ $target == "$NEZHA_CLUSTER_DIR"/* ]]; then
      echo "$f"
    elif [[ $target == /var/log/pods/* ]]; then
      # A kubelet before 1.30 ignores podLogsDir and logs under /var/log/pods/<ns>_<pod>_<uid>/;
      # the pod is ours when our kubelet's root dir knows its uid.
      pod_dir=${target#/var/log/pods/}
      pod_dir=${pod_dir%%/*}
      [ -d "$NEZHA_CLUSTER_DIR/kubelet/pods/${pod_dir##*_}" ] && echo "$f"
    fi
  done
  local address
  for f in "$NEZHA_CLUSTER_DIR"/containerd/state/io.containerd.runtime.v2.task/*/*/address; do
    [ -f "$f" ] || continue
    address=$(cat "$f") # "unix:///run/containerd/s/<hash>", no trailing newline
    [[ $address != unix://* ]] || echo "${address#unix://}"
  done
}

# cluster_remove_hardcoded_paths: the paths tools hard-code, only where `up` found none.
cluster_remove_hardcoded_paths() {
  [ -f "$C_SNAPSHOT/paths" ] || return 0
  local p
  for p in "${CLUSTER_HARDCODED_PATHS[@]}"; do
    grep -qxF "$p" "$C_SNAPSHOT/paths" && continue
    if [ -e "$p" ]; then
      cluster_unmount_under "$p"
      rm -rf "$p"
    fi
  done
  # /run/netns is shared with other tools (ip netns, test beds): remove it only if it is ours
  # and empty.
  if ! grep -qxF /run/netns "$C_SNAPSHOT/paths" && [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
    cluster_unmount_under /run/netns
    rmdir /run/netns 2>/dev/null || true
  fi
}
