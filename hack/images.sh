#!/usr/bin/env bash
# Build Nezha's three images as docker-archive tarballs, without a Docker engine or a registry:
#
#   hack/images.sh            build all three into build/images/ (no root)
#   hack/images.sh --list     print the tarball paths, one a line
#   hack/images.sh push       push the three tarballs to $NEZHA_IMAGE_PREFIX/<name>:$NEZHA_IMAGE_TAG
#                             with crane (pinned in versions.sh, built by hack/setup.sh); prints
#                             each pushed reference with its digest and writes them to
#                             $NEZHA_IMAGES_OUT/digests.txt
#
#   build/images/operator.tar    nezha/operator:<tag>     /nezha-operator (static)
#   build/images/rail-agent.tar  nezha/rail-agent:<tag>   /nezha-rail-agent, /nezha-rail (static)
#   build/images/runtime.tar     nezha/runtime:<tag>      /opt/nezha/{bin,lib,include[,python]},
#                                the shared libraries nezha-bench/nezha-tune need (as ldd names
#                                them, dynamic loader included) and a static busybox as /bin/sh
#
# The contents match images/*/Dockerfile. Load them into the local cluster with
# `hack/local-cluster.sh load-image build/images/<name>.tar` (root).
#
# Tunables (env, default):
#   NEZHA_IMAGE_TAG       chart appVersion   tag of all three images
#   NEZHA_IMAGE_PREFIX    nezha              repository prefix (the chart's default image names);
#                                            `make images REGISTRY=host[:port][/path]` sets it to
#                                            REGISTRY/nezha (the chart's image.registry = REGISTRY)
#   NEZHA_RUNTIME_BUILD   build/runtime      CMake build dir with nezha-bench, nezha-tune, libnezha
#                                            (`make build-runtime`); this script does not build it
#   NEZHA_IMAGES_OUT      build/images       where tarballs (and their staging trees) go
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=images.sh
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"

chart_app_version() { sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$REPO/charts/nezha/Chart.yaml"; }

NEZHA_IMAGE_TAG=${NEZHA_IMAGE_TAG:-$(chart_app_version)}
NEZHA_IMAGE_PREFIX=${NEZHA_IMAGE_PREFIX:-nezha}
NEZHA_RUNTIME_BUILD=${NEZHA_RUNTIME_BUILD:-$REPO/build/runtime}
NEZHA_IMAGES_OUT=${NEZHA_IMAGES_OUT:-$REPO/build/images}

# Busybox applets linked into the runtime image: the operator's init container needs sh and cp;
# the rest make a worker pod debuggable (addresses, links, connectivity); awk, wget and timeout
# serve the chart's `helm test` pod (Debian's busybox 1.35 wget crashes on -T: use timeout).
# seq, nslookup and grep run training-operator's PyTorchJob wait-for-master init container (hack/kubeflow.sh).
RUNTIME_APPLETS=(sh cp ls cat mkdir env sleep echo ip ping hostname nslookup wc grep awk wget timeout seq)
BUSYBOX=/bin/busybox

validate() {
  validate_name
  local f
  for f in nezha-bench nezha-tune libnezha.so libnccl-net-nezha.so; do
    [ -e "$NEZHA_RUNTIME_BUILD/$f" ] ||
      fail "NEZHA_RUNTIME_BUILD: $NEZHA_RUNTIME_BUILD/$f is missing (run: make build-runtime)"
  done
  [ -x "$BUSYBOX" ] || fail "missing $BUSYBOX (Debian package busybox-static; run hack/setup.sh)"
  require_cmd go ldd
}

validate_name() {
  [[ $NEZHA_IMAGE_TAG =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
    die "NEZHA_IMAGE_TAG (TAG): want a Docker tag ([A-Za-z0-9_.-], up to 128), got '$NEZHA_IMAGE_TAG'"
  # An optional registry host[:port]/, then a lowercase repository path.
  [[ $NEZHA_IMAGE_PREFIX =~ ^([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._/-][a-z0-9]+)*$ ]] ||
    die "NEZHA_IMAGE_PREFIX (REGISTRY): want [host[:port]/]lowercase/path, got '$NEZHA_IMAGE_PREFIX'"
}

# push: each tarball to its name under NEZHA_IMAGE_PREFIX. The prefix must start with a registry
# host: a bare `nezha/...` would mean the default public registry, never what was meant here.
push() {
  validate_name
  local host=${NEZHA_IMAGE_PREFIX%%/*}
  [[ $NEZHA_IMAGE_PREFIX == */* && ($host == *.* || $host == *:* || $host == localhost) ]] ||
    die "push: NEZHA_IMAGE_PREFIX '$NEZHA_IMAGE_PREFIX' names no registry host (set REGISTRY=host[:port][/path], e.g. make push REGISTRY=registry.example:5000)"
  local crane="$NEZHA_TOOLS_BIN/crane-$CRANE_VERSION"
  [ -x "$crane" ] || fail "push: $crane is missing (run: hack/setup.sh)"
  local name tarball ref pushed digests=()
  for name in operator rail-agent runtime; do
    tarball=$NEZHA_IMAGES_OUT/$name.tar
    [ -f "$tarball" ] || fail "push: $tarball is missing (run: make images)"
    ref=$NEZHA_IMAGE_PREFIX/$name:$NEZHA_IMAGE_TAG
    # crane prints the pushed reference by digest (repo@sha256:...) on stdout.
    pushed=$("$crane" push "$tarball" "$ref") || fail "push: crane could not push $tarball to $ref"
    [[ $pushed == *@sha256:* ]] || fail "push: crane printed '$pushed', not a digest reference"
    echo "$ref ${pushed##*@}"
    digests+=("$ref ${pushed##*@}")
  done
  printf '%s\n' "${digests[@]}" >"$NEZHA_IMAGES_OUT/digests.txt"
  log "pushed 3 images; digests in $NEZHA_IMAGES_OUT/digests.txt"
}

imagebuilder() {
  (cd "$REPO" && go run ./hack/imagebuilder "$@")
}

# go_static OUTDIR PKG...: CGO-free, stripped binaries that run on an empty base image. The rail
# agent reports main.version in RailNode status.agentVersion: stamp it with the image tag.
go_static() {
  local out=$1
  shift
  (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$NEZHA_IMAGE_TAG" -o "$out/" "$@")
}

build_operator() {
  local stage=$OUT_STAGE/operator
  go_static "$stage" ./operator/cmd/nezha-operator
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/operator:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/operator.tar" \
    --file "$stage/nezha-operator:/nezha-operator" --user 65532:65532 --entrypoint '["/nezha-operator"]'
}

build_rail_agent() {
  local stage=$OUT_STAGE/rail-agent
  go_static "$stage" ./cni/cmd/nezha-rail ./cni/cmd/nezha-rail-agent
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/rail-agent:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/rail-agent.tar" \
    --file "$stage/nezha-rail:/nezha-rail" --file "$stage/nezha-rail-agent:/nezha-rail-agent" \
    --entrypoint '["/nezha-rail-agent"]'
}

# shared_libs BINARY...: "resolved-file image-path" per library ldd reports (vdso excluded), so
# each library lands where the binary's loader looks for it, as a regular file.
shared_libs() {
  local bin
  # One ldd per binary: given several, ldd prints a "BINARY:" header line before each.
  for bin in "$@"; do ldd "$bin"; done | awk '
    /=> \// { print $3; next }          # libfoo.so.N => /path (0x...)
    /^[ \t]+\// { print $1 }            # the dynamic loader: /lib64/ld-linux-x86-64.so.2 (0x...)
  ' | sort -u | while read -r path; do
    printf '%s %s\n' "$(readlink -f "$path")" "$path"
  done
}

build_runtime() {
  local stage=$OUT_STAGE/runtime opt
  opt=$stage/opt/nezha
  rm -rf "$stage"
  mkdir -p "$opt/bin" "$opt/lib"
  cp "$NEZHA_RUNTIME_BUILD/nezha-bench" "$NEZHA_RUNTIME_BUILD/nezha-tune" "$opt/bin/"
  cp -P "$NEZHA_RUNTIME_BUILD"/libnezha.so* "$opt/lib/"
  # The NCCL net plugin (spec.runtime.integration: nccl finds it through LD_LIBRARY_PATH).
  cp "$NEZHA_RUNTIME_BUILD/libnccl-net-nezha.so" "$opt/lib/"
  cp -r "$REPO/runtime/include" "$opt/include"
  [ -d "$REPO/runtime/python" ] && cp -r "$REPO/runtime/python" "$opt/python"
  find "$opt" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +

  local args=(--dir "$stage" --file "$BUSYBOX:/bin/busybox")
  local real path applet
  while read -r real path; do
    args+=(--file "$real:$path")
  done < <(shared_libs "$opt/bin/nezha-bench" "$opt/bin/nezha-tune" "$opt/lib/libnezha.so" \
    "$opt/lib/libnccl-net-nezha.so")
  for applet in "${RUNTIME_APPLETS[@]}"; do
    args+=(--symlink "/bin/$applet=busybox")
  done
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/runtime:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/runtime.tar" \
    "${args[@]}" \
    --env LD_LIBRARY_PATH=/opt/nezha/lib --env PYTHONPATH=/opt/nezha/python --env PATH=/opt/nezha/bin:/bin \
    --cmd '["/bin/sh","-c","cp -a /opt/nezha/. /nezha-runtime/"]'
}

main() {
  case "${1:-}" in
    "") ;;
    --list)
      printf '%s\n' "$NEZHA_IMAGES_OUT"/{operator,rail-agent,runtime}.tar
      return 0
      ;;
    push)
      push
      return 0
      ;;
    *) die "unknown argument '$1' (want no argument, --list or push)" ;;
  esac
  validate
  OUT_STAGE=$NEZHA_IMAGES_OUT/stage
  mkdir -p "$NEZHA_IMAGES_OUT" "$OUT_STAGE"
  build_operator
  build_rail_agent
  build_runtime
  log "built $NEZHA_IMAGE_PREFIX/{operator,rail-agent,runtime}:$NEZHA_IMAGE_TAG in $NEZHA_IMAGES_OUT"
}

main "$@"
