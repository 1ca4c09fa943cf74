# shellcheck shell=bash
# Writes the local cluster's PKI, kubeconfig and component configs into $NEZHA_CLUSTER_DIR.
# Every path a component would otherwise default to on the host (/var/lib/containerd,
# /run/containerd, /opt/containerd, /var/lib/kubelet, /var/log/pods, /etc/cni, /opt/cni/bin,
# /var/lib/cni/networks, /var/run/kubernetes) is pointed into the state dir here; what cannot be
# moved is listed in cluster-env.sh (CLUSTER_HARDCODED_PATHS) and cleaned by `down`.

# cluster_write_pki: a CA, the apiserver's serving cert (signed by it, so kubeconfigs and pods
# can verify it), the service-account signing key and the static admin token.
cluster_write_pki() {
  mkdir -p "$C_PKI"
  (
    cd "$C_PKI"
    cat >openssl.cnf <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = nezha-local-ca
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,IP:$CLUSTER_NODE_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN
EOF
    openssl req -x509 -new -config openssl.cnf -extensions ca -newkey rsa:2048 -nodes \
      -keyout ca.key -out ca.crt -days 3650 2>/dev/null
    openssl req -new -config openssl.cnf -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile openssl.cnf -extensions server -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    # One static token for everything (admin, kubelet, controllers, Multus, CoreDNS): this is a
    # throwaway single-user test cluster bound to loopback.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >token
    printf '%s,admin,admin,system:masters\n' "$(cat token)" >tokens.csv
    chmod 600 ./*.key token tokens.csv
  ) || fail "generating the cluster PKI failed (openssl)"
}

cluster_write_kubeconfig() {
  cat >"$C_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nezha-local
  cluster:
    server: $C_API_URL
    certificate-authority-data: $(base64 -w0 "$C_PKI/ca.crt")
users:
- name: admin
  user:
    token: $(cat "$C_PKI/token")
contexts:
- name: nezha-local
  context: {cluster: nezha-local, user: admin}
current-context: nezha-local
EOF
  chmod 600 "$C_KUBECONFIG"
}

cluster_write_containerd_config() {
  local d="$NEZHA_CLUSTER_DIR/containerd"
  mkdir -p "$d/root" "$d/state" "$d/opt" "$d/runc"
  cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
# Plugins that would touch the host or need kernel features this node does not use.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$C_CONTAINERD_SOCK"
[ttrpc]
  address = "$C_CONTAINERD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$CLUSTER_PAUSE_IMAGE"
  # This machine lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$C_CNI_BIN"
    conf_dir = "$C_CNI_CONF"
    max_conf_num = 1
EOF
}

# cluster_write_cni_config: Multus is the only network config containerd sees; it delegates eth0
# to bridge + host-local on the pre-created pod bridge (isGateway false, so the bridge plugin never
# enables ip_forward) and adds NetworkAttachmentDefinitions as net1, net2, ...
# The CNI bin dir links the Debian reference plugins, Multus and NEZHA_CLUSTER_CNI_PLUGINS (e.g.
# nezha-rail); more can be dropped in while the cluster runs (`env` prints NEZHA_CNI_BIN_DIR).
cluster_write_cni_config() {
  mkdir -p "$C_CNI_BIN" "$C_CNI_CONF" "$NEZHA_CLUSTER_DIR/cni/ipam" "$NEZHA_CLUSTER_DIR/cni/multus"
  local p
  for p in /usr/lib/cni/*; do ln -sf "$p" "$C_CNI_BIN/$(basename "$p")"; done
  ln -sf "$CLUSTER_BIN/multus-$MULTUS_VERSION" "$C_CNI_BIN/multus"
  for p in ${NEZHA_CLUSTER_CNI_PLUGINS//,/ }; do ln -sf "$p" "$C_CNI_BIN/$(basename "$p")"; done
  cat >"$C_CNI_CONF/00-multus.conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "$C_KUBECONFIG",
  "binDir": "$C_CNI_BIN",
  "cniDir": "$NEZHA_CLUSTER_DIR/cni/multus",
  "confDir": "$C_CNI_CONF/multus.d",
  "logFile": "$C_LOGS/multus.log",
  "logLevel": "verbose",
  "logToStderr": false,
  "delegates": [{
    "cniVersion": "1.0.0",
    "name": "nezha-pod-network",
    "type": "bridge",
    "bridge": "$CLUSTER_POD_BRIDGE",
    "isGateway": false,
    "ipMasq": false,
    "ipam": {
      "type": "host-local",
      "dataDir": "$NEZHA_CLUSTER_DIR/cni/ipam",
      "ranges": [[{"subnet": "$CLUSTER_POD_CIDR", "rangeStart": "${CLUSTER_POD_CIDR%.*}.10", "gateway": "$CLUSTER_POD_GATEWAY"}]],
      "routes": [{"dst": "0.0.0.0/0", "gw": "$CLUSTER_POD_GATEWAY"}]
    }
  }]
}
EOF
}

cluster_write_kubelet_config() {
  local d="$NEZHA_CLUSTER_DIR/kubelet"
  mkdir -p "$d" "$NEZHA_CLUSTER_DIR/pod-logs"
  # Pods get only cluster DNS, not the host's resolvers (the cluster is offline by design).
  : >"$NEZHA_CLUSTER_DIR/resolv.conf"
  cat >"$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $CLUSTER_NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$C_CONTAINERD_SOCK
# cgroup v1 host without systemd as init.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Leave the host's iptables alone (no KUBE-* chains).
makeIPTablesUtilChains: false
clusterDNS: [$CLUSTER_POD_GATEWAY]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $NEZHA_CLUSTER_DIR/resolv.conf
podLogsDir: $NEZHA_CLUSTER_DIR/pod-logs
# Images are imported, never pulled: image GC must not delete them on a fullish disk, and a busy
# shared machine must not trigger evictions.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
EOF
}

cluster_write_corefile() {
  mkdir -p "$NEZHA_CLUSTER_DIR/coredns"
  cat >"$NEZHA_CLUSTER_DIR/coredns/Corefile" <<EOF
# cluster.local from the API (headless Services resolve to pod IPs; ClusterIPs exist in DNS but
# nothing routes them, there is no kube-proxy). Everything else: NXDOMAIN, the cluster is offline.
$CLUSTER_DOMAIN:53 {
    bind $CLUSTER_POD_GATEWAY
    errors
    kubernetes $CLUSTER_DOMAIN {
        kubeconfig $C_KUBECONFIG
        pods insecure
    }
}
.:53 {
    bind $CLUSTER_POD_GATEWAY
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
}

cluster_write_configs() {
  cluster_write_pki
  cluster_write_kubeconfig
  cluster_write_containerd_config
  cluster_write_cni_config
  cluster_write_kubelet_config
  cluster_write_corefile
}
