#!/usr/bin/env bash
# Installs what Nezha's build, tests, benchmarks and local cluster need. Idempotent and cached:
# a second run on the same machine only checks. Usage:
#   hack/setup.sh            Debian packages + Go tools + envtest binaries (what `make test` needs)
#   hack/setup.sh cluster    also the node binaries for hack/local-cluster.sh
#   hack/setup.sh kind       also what hack/kind.sh needs (kind, and with NEZHA_KIND_SANDBOX=1 what
#                            hack/kind-sandbox/node-image.sh needs); Docker must be installed and
#                            running already (it is checked, with what to do when it is not)
#   hack/setup.sh --packages [MODE]   print the Debian packages MODE installs, install nothing
# Go itself is not installed here: the toolchain go.mod names (Debian 12's golang-go is older).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
# shellcheck source=hack/lib/docker-check.sh
source "$here/lib/docker-check.sh"
log() { echo "setup: $*" >&2; }
fail() {
  log "$*"
  exit 1
}

# Debian bookworm packages. Versions are pinned by the distribution release; we name packages,
# never mirrors.
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config googletest libgtest-dev  # runtime (C++)
  nlohmann-json3-dev                                                    # runtime JSON (header-only)
  libibverbs-dev                                                        # runtime RDMA rails (rdma-core)
  clang-format shellcheck                                               # make lint
  clang libclang-rt-14-dev                                              # make fuzz (libFuzzer)
  iproute2 iperf3 ethtool mptcpize                                      # rail test bed, baselines
  libgloo-dev linux-perf                                                # Gloo baseline in benches, CPU profile (make bench-unshaped)
  python3-pytest python3-numpy python3-matplotlib                       # python tests, plots
  python3-venv python3-dev                                              # the torch 2 venv (hack/setup-torch.sh), nezha._C build
  containerd runc containernetworking-plugins busybox-static           # local cluster + CNI tests
  jq curl openssl iptables procps                                     # local cluster, e2e host snapshots
)
# Only for the sandbox's kind node image (hack/kind-sandbox/README.md): its Debian root filesystem.
KIND_SANDBOX_APT_PACKAGES=(mmdebstrap)

# add_mode_packages MODE: add what MODE needs beyond the default set to APT_PACKAGES.
add_mode_packages() {
  case "$1" in
    "" | cluster) ;;
    kind)
      [[ ${NEZHA_KIND_SANDBOX:-0} =~ ^[01]$ ]] || fail "NEZHA_KIND_SANDBOX: want 0 or 1, got '$NEZHA_KIND_SANDBOX'"
      [ "${NEZHA_KIND_SANDBOX:-0}" = 0 ] || APT_PACKAGES+=("${KIND_SANDBOX_APT_PACKAGES[@]}")
      ;;
    *)
      echo "setup.sh: unknown mode '$1' (want nothing, cluster, kind or --packages [MODE])" >&2
      exit 2
      ;;
  esac
}

MODE=${1:-}
if [ "$MODE" = --packages ]; then
  # What a run in that mode installs from Debian (hack/tests/test_kind_setup.py checks the kind
  # path's commands against it).
  add_mode_packages "${2:-}"
  printf '%s\n' "${APT_PACKAGES[@]}"
  exit 0
fi
add_mode_packages "$MODE"
if [ "$MODE" = kind ]; then
  # First, so a machine without Docker hears it before anything is installed or built.
  why=$(docker_problem) || fail "the kind path needs Docker: $why"
fi

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # On hosts with systemd the containerd package starts its own daemon; Nezha's local cluster
  # runs a private instance, so stop the packaged one rather than share it.
  if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
    systemctl stop containerd || true
  fi
}

go_tool() { # name module version
  local name=$1 module=$2 version=$3
  local target="$NEZHA_TOOLS_BIN/$name-$version"
  if [ ! -x "$target" ]; then
    log "building $name $version"
    mkdir -p "$NEZHA_TOOLS_BIN"
    GOBIN="$NEZHA_CACHE/tools/gobin-$name-$version" go install "$module@$version"
    mv "$NEZHA_CACHE/tools/gobin-$name-$version/$(basename "$module")" "$target"
    rm -rf "$NEZHA_CACHE/tools/gobin-$name-$version"
  fi
  ln -sf "$name-$version" "$NEZHA_TOOLS_BIN/$name"
}

command -v go >/dev/null 2>&1 ||
  fail "missing command 'go': install the Go toolchain go.mod names (Debian 12's golang-go is older)"
install_apt
go_tool controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN_VERSION"
go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
go_tool crane github.com/google/go-containerregistry/cmd/crane "$CRANE_VERSION"
go_tool kube-score github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION"
"$here/build-kube.sh" envtest >/dev/null
"$here/setup-torch.sh"  # the PyTorch 2 venv of the nezha c10d backend
if [ "$MODE" = kind ]; then go_tool kind sigs.k8s.io/kind "$KIND_VERSION"; fi
if [ "$MODE" = cluster ]; then
  "$here/build-kube.sh" node >/dev/null
  # Multus, CoreDNS and the pause image, so the first e2e test doesn't pay for them.
  "$here/local-cluster.sh" build >/dev/null
fi
log "ok (tools in $NEZHA_TOOLS_BIN, kube binaries in $NEZHA_KUBE_BIN)"
