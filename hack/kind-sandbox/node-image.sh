#!/usr/bin/env bash
# SANDBOX WORKAROUND — builds a kind node image on a machine that cannot pull one.
#
#   hack/kind-sandbox/node-image.sh          build (cached) and print the image reference
#   hack/kind-sandbox/node-image.sh --ref    print the reference it would build, build nothing
#
# Users never need this: on an ordinary Docker host `hack/kind.sh` uses kind's own node image.
# Nezha's development sandbox reaches no container registry, so here the node image is made from
# parts that come through package clients only:
#   - the root filesystem: Debian 12 from the host's own apt sources (mmdebstrap), with systemd,
#     containerd and runc, iptables, the reference CNI plugins (containernetworking-plugins);
#   - kind's node-side files (entrypoint, kubelet units, sysctls) from the sigs.k8s.io/kind Go
#     module of the pinned KIND_VERSION, read from the module cache at build time;
#   - kubeadm, kubelet, kubectl and the control-plane binaries from hack/build-kube.sh, etcd and
#     CoreDNS built from the Go module proxy, the pause image from hack/imagebuilder/pause;
#   - control-plane images (one static binary each, hack/imagebuilder; kube-proxy on the Debian
#     root because it needs iptables) preloaded into the node's containerd by a boot-time unit
#     that runs before the kubelet, under the repository name nezha.local so no image name points
#     at a registry. kind's cluster config must set kubeadm's imageRepository and tags to match:
#     `hack/kind.sh` does that when NEZHA_KIND_NODE_IMAGE is this image (see kubeadm-patch below).
#   - containerd's runc is the capability-dropping wrapper of this directory (README.md): pods
#     inside the node that ask for every capability (kube-proxy) hit the same sandbox limit.
# No kindnet image exists here, so clusters on this image use hack/kind.sh's static pod network.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PROG=node-image.sh
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

WORK="$NEZHA_CACHE/kind-node"
IMAGE_REPO=nezha.local
PAUSE_TAG=3.10
# Packages of the node root filesystem (kind's base image installs the same set from its own
# builds; here Debian's containerd 1.6 and runc stand in for kind's pinned ones).
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,e2fsprogs,socat,ebtables

node_ref() {
  # The tag changes with everything that goes into the image, so a stale image is never reused.
  local sum
  sum=$({
    echo "$KUBE_VERSION $ETCD_VERSION $COREDNS_VERSION $KIND_VERSION $PACKAGES"
    cat "$0" "$REPO/hack/kind-sandbox/runc-drop-sys-resource.sh" "$REPO/hack/kind-sandbox/node-files/"*
  } | sha256sum | cut -c1-12)
  echo "nezha.local/kind-node:$KUBE_VERSION-$sum"
}

kind_module_dir() {
  go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir
}

build_base() {
  local ref=nezha.local/kind-base:bookworm
  if docker image inspect "$ref" >/dev/null 2>&1; then echo "$ref"; return 0; fi
  require_tool mmdebstrap "install the Debian package mmdebstrap (NEZHA_KIND_SANDBOX=1 hack/setup.sh kind does)"
  local sources="" f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    if [ -s "$f" ]; then sources=$f; break; fi
  done
  [ -n "$sources" ] || fail "no apt sources on this host to build the node root filesystem from"
  log "building the node root filesystem (Debian bookworm from $sources; a few minutes)"
  mkdir -p "$WORK"
  mmdebstrap --variant=minbase --include="$PACKAGES" --skip=check/signed-by bookworm \
    "$WORK/rootfs.tar" "$sources" >&2 || fail "mmdebstrap failed"
  docker import "$WORK/rootfs.tar" "$ref" >/dev/null
  rm -f "$WORK/rootfs.tar"
  echo "$ref"
}

# control_plane_images DIR: docker-archive tarballs of every image kubeadm's static pods and
# add-ons use, tagged as kubeadm will ask for them (see kubeadm_patch in hack/kind.sh).
control_plane_images() {
  local out=$1 base=$2 c
  "$REPO/hack/build-kube.sh" kind >/dev/null
  cluster_build_coredns
  mkdir -p "$out"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    cluster_imagebuilder --tag "$IMAGE_REPO/$c:$KUBE_VERSION" --output "$out/$c.tar" \
      --file "$NEZHA_KUBE_BIN/$c:/usr/local/bin/$c" --env PATH=/usr/local/bin >/dev/null
  done
  cluster_imagebuilder --tag "$IMAGE_REPO/etcd:$ETCD_VERSION" --output "$out/etcd.tar" \
    --file "$NEZHA_KUBE_BIN/etcd:/usr/local/bin/etcd" --env PATH=/usr/local/bin >/dev/null
  cluster_imagebuilder --tag "$IMAGE_REPO/coredns:$COREDNS_VERSION" --output "$out/coredns.tar" \
    --file "$CLUSTER_BIN/coredns-$COREDNS_VERSION:/coredns" --entrypoint '["/coredns"]' >/dev/null
  (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CLUSTER_BIN/pause" ./hack/imagebuilder/pause)
  cluster_imagebuilder --tag "$IMAGE_REPO/pause:$PAUSE_TAG" --output "$out/pause.tar" \
    --file "$CLUSTER_BIN/pause:/pause" --entrypoint '["/pause"]' >/dev/null
  # kube-proxy runs iptables and conntrack, so it gets the Debian root underneath.
  local ctx="$WORK/kube-proxy-ctx"
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp "$NEZHA_KUBE_BIN/kube-proxy" "$ctx/"
  printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' "$base" >"$ctx/Dockerfile"
  docker build -q -t "$IMAGE_REPO/kube-proxy:$KUBE_VERSION" "$ctx" >/dev/null
  docker save -o "$out/kube-proxy.tar" "$IMAGE_REPO/kube-proxy:$KUBE_VERSION"
}

build_node() {
  local ref=$1 base ctx kind_files
  base=$(build_base)
  kind_files="$(kind_module_dir)/images/base/files"
  [ -f "$kind_files/usr/local/bin/entrypoint" ] || fail "no kind entrypoint in $kind_files"
  ctx="$WORK/ctx"
  rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/images"
  cp -r "$kind_files" "$ctx/kind-files"
  chmod -R u+w "$ctx/kind-files"
  cp "$REPO/hack/kind-sandbox/node-files/"* "$ctx/"
  cp "$REPO/hack/kind-sandbox/runc-drop-sys-resource.sh" "$ctx/runc-sandbox"
  control_plane_images "$ctx/images" "$base"
  cp "$NEZHA_KUBE_BIN/kubeadm" "$NEZHA_KUBE_BIN/kubelet" "$NEZHA_KUBE_BIN/kubectl" "$ctx/bin/"
  sed -e "s|@BASE@|$base|" -e "s|@KUBE_VERSION@|$KUBE_VERSION|" "$ctx/Dockerfile.in" >"$ctx/Dockerfile"
  sed -i "s|@PAUSE@|$IMAGE_REPO/pause:$PAUSE_TAG|" "$ctx/containerd-config.toml"
  log "building $ref"
  docker build -q -t "$ref" "$ctx" >/dev/null
  rm -rf "$ctx"
}

case "${1:-}" in
  --ref) node_ref ;;
  "")
    why=$(docker_problem) || fail "$why"
    require_tool go "install the Go toolchain go.mod names"
    require_cmd jq
    ref=$(node_ref)
    docker image inspect "$ref" >/dev/null 2>&1 || build_node "$ref"
    echo "$ref"
    ;;
  -h | --help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//' >&2 ;;
  *) die "unknown argument '$1' (want nothing, --ref or --help)" ;;
esac
