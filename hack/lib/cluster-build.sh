# shellcheck shell=bash
# Builds (once, cached under $NEZHA_CACHE) everything the local cluster runs besides the
# Kubernetes binaries: Multus, CoreDNS, the pause image. Needs versions.sh, common.sh,
# cluster-env.sh sourced, and $REPO set to the repository root.

# build_go_main NAME MODULE VERSION PACKAGE: build PACKAGE (a main package of MODULE@VERSION)
# into $CLUSTER_BIN/NAME-VERSION (see build_go_main_into).
build_go_main() { build_go_main_into "$CLUSTER_BIN" "$@"; }

# build_go_main_into DIR NAME MODULE VERSION PACKAGE: the same into DIR/NAME-VERSION, through a
# small wrapper module, as build-kube.sh does for Kubernetes, so the resolved go.sum is kept next
# to the build and reused on the next cold build. hack/kubeflow.sh keeps its controllers in a
# directory of their own.
build_go_main_into() {
  local dir=$1 name=$2 module=$3 version=$4 pkg=$5
  local out="$dir/$name-$version"
  [ -x "$out" ] && return 0
  local src="$NEZHA_CACHE/src/$name-$version"
  mkdir -p "$src" "$dir"
  if [ ! -f "$src/go.sum" ]; then
    printf 'module nezha.local/%s-build\n\ngo 1.24\n\nrequire %s %s\n' "$name" "$module" "$version" >"$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy) >&2 || fail "resolving $module@$version failed"
  fi
  log "building $name $version (cold: a few minutes)"
  (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg") ||
    fail "building $name $version failed"
  mv "$out.tmp" "$out"
}

cluster_build_multus() {
  build_go_main multus gopkg.in/k8snetworkplumbingwg/multus-cni.v4 "$MULTUS_VERSION" \
    gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus
}

cluster_build_coredns() {
  build_go_main coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
}

# cluster_build_pause_image: the pause binary and its image tarball. Rebuilt every time (Go's
# build cache makes that a second or two) so a change to the pause source is always picked up;
# the image is deterministic, so an unchanged source gives the same digest.
cluster_build_pause_image() {
  mkdir -p "$CLUSTER_BIN" "$CLUSTER_IMAGES"
  (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CLUSTER_BIN/pause" ./hack/imagebuilder/pause) ||
    fail "building the pause binary failed"
  cluster_imagebuilder --tag "$CLUSTER_PAUSE_IMAGE" --output "$CLUSTER_IMAGES/pause.tar" \
    --file "$CLUSTER_BIN/pause:/pause" --entrypoint '["/pause"]' >/dev/null
}

# cluster_imagebuilder ARGS...: run hack/imagebuilder (built into the cache).
cluster_imagebuilder() {
  mkdir -p "$CLUSTER_BIN"
  (cd "$REPO" && go build -o "$CLUSTER_BIN/imagebuilder" ./hack/imagebuilder) || fail "building imagebuilder failed"
  "$CLUSTER_BIN/imagebuilder" "$@"
}

# cluster_nad_crd: path of the NetworkAttachmentDefinition CRD shipped in the
# network-attachment-definition-client module (downloaded into the module cache if needed).
cluster_nad_crd() {
  local dir
  dir=$(go mod download -json "github.com/k8snetworkplumbingwg/network-attachment-definition-client@$NAD_CLIENT_VERSION" | jq -r .Dir) ||
    fail "downloading network-attachment-definition-client $NAD_CLIENT_VERSION failed"
  [ -f "$dir/artifacts/networks-crd.yaml" ] || fail "no artifacts/networks-crd.yaml in $dir"
  echo "$dir/artifacts/networks-crd.yaml"
}

cluster_build_all() {
  "$REPO/hack/build-kube.sh" node >/dev/null || fail "hack/build-kube.sh node failed"
  cluster_build_multus
  cluster_build_coredns
  cluster_build_pause_image
}
