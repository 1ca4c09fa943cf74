#!/usr/bin/env bash
# Real Kubeflow controllers for the local cluster, built from the Go module proxy:
#
#   hack/kubeflow.sh build        build (cached) the three controllers and their image tarballs
#   hack/kubeflow.sh images       print the image tarball paths, one a line (after build)
#   hack/kubeflow.sh manifests    print the path of each install manifest, one a line (after build)
#
#   trainer            github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager  $TRAINER_VERSION
#   jobset             sigs.k8s.io/jobset (main package at the module root)            $JOBSET_VERSION
#   training-operator  github.com/kubeflow/training-operator/cmd/training-operator.v1  $TRAINING_OPERATOR_VERSION
#
# Each binary is built through a small wrapper module (build_go_main_into in
# hack/lib/cluster-build.sh, the helper that builds the local cluster's Multus and CoreDNS) into
# $NEZHA_CACHE/kubeflow/bin/NAME-VERSION, then packed by hack/imagebuilder into a one-file image
# nezha.local/kubeflow/NAME:VERSION ($NEZHA_CACHE/kubeflow/images/NAME.tar, user 65532 like the
# upstream distroless images). The install manifests are the projects' own
# kustomizations from the same module versions (CRDs, RBAC, Deployment, webhook Service and
# configurations, in-process certificate rotation), rendered with `kubectl kustomize` with only
# the image swapped for ours and imagePullPolicy Never ($NEZHA_CACHE/kubeflow/manifests/NAME.yaml).
# Used by e2e/nezha/test_kubeflow.py; versions are pinned in hack/versions.sh.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=kubeflow.sh
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"
# The Go wrapper-module build and the image builder the local cluster's own components use.
# shellcheck source=hack/lib/cluster-env.sh
source "$REPO/hack/lib/cluster-env.sh"
# shellcheck source=hack/lib/cluster-build.sh
source "$REPO/hack/lib/cluster-build.sh"

KF_DIR="$NEZHA_CACHE/kubeflow"
KF_BIN="$KF_DIR/bin"
KF_IMAGES="$KF_DIR/images"
KF_MANIFESTS="$KF_DIR/manifests"
NAMES=(trainer jobset training-operator)
# The image (of those the local cluster has) that runs the PyTorchJob workers' wait-for-master init
# container.
TRAINING_OPERATOR_INIT_IMAGE=${TRAINING_OPERATOR_INIT_IMAGE:-docker.io/nezha/runtime:0.1.0}

module_of() {
  case $1 in
    trainer) echo "github.com/kubeflow/trainer/v2 $TRAINER_VERSION github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager" ;;
    jobset) echo "sigs.k8s.io/jobset $JOBSET_VERSION sigs.k8s.io/jobset" ;;
    training-operator) echo "github.com/kubeflow/training-operator $TRAINING_OPERATOR_VERSION github.com/kubeflow/training-operator/cmd/training-operator.v1" ;;
  esac
}

version_of() { module_of "$1" | awk '{print $2}'; }
image_of() { echo "nezha.local/kubeflow/$1:$(version_of "$1")"; }

# module_dir MODULE VERSION: the module's source in the module cache (downloaded if needed).
module_dir() {
  go mod download -json "$1@$2" | jq -r .Dir
}

build_binary() {
  local name=$1 module version pkg
  read -r module version pkg <<<"$(module_of "$name")"
  build_go_main_into "$KF_BIN" "$name" "$module" "$version" "$pkg"
}

build_image() {
  local name=$1 version
  version=$(version_of "$name")
  mkdir -p "$KF_IMAGES"
  cluster_imagebuilder --tag "$(image_of "$name")" --output "$KF_IMAGES/$name.tar" \
    --file "$KF_BIN/$name-$version:/manager" --user 65532:65532 --entrypoint '["/manager"]' >/dev/null
}

# write_kustomization NAME DIR: our overlay of the project's own kustomization from the module
# cache (relative paths into the read-only module directory): the image is ours, pulled never.
write_kustomization() {
  local name=$1 dir=$2 src image
  src=$(module_dir "$(module_of "$name" | awk '{print $1}')" "$(version_of "$name")") ||
    fail "downloading the $name module failed"
  image=$(image_of "$name")
  mkdir -p "$dir"
  # kustomize takes bases only by relative path.
  src=$(realpath --relative-to "$dir" "$src")
  case "$name" in
    trainer)
      # = manifests/overlays/manager without its remote JobSet release (we install JobSet from
      # its own module) and without the public SDK ConfigMap.
      cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow-system
resources:
  - namespace.yaml
  - $src/manifests/base/crds
  - $src/manifests/base/manager
  - $src/manifests/base/rbac
  - $src/manifests/base/webhook
images:
  - name: ghcr.io/kubeflow/trainer/trainer-controller-manager
    newName: ${image%:*}
    newTag: ${image##*:}
secretGenerator:
  - name: kubeflow-trainer-webhook-cert
    namespace: kubeflow-system
    options:
      disableNameSuffixHash: true
patches:
  - target: {kind: Deployment, name: kubeflow-trainer-controller-manager}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
YAML
      printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeflow-system\n' >"$dir/namespace.yaml"
      ;;
    jobset)
      # = config/default (what JobSet's release manifests.yaml is built from).
      cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $src/config/default
images:
  - name: us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset
    newName: ${image%:*}
    newTag: ${image##*:}
patches:
  - target: {kind: Deployment, name: jobset-controller-manager}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
YAML
      ;;
    training-operator)
      # = manifests/overlays/standalone. Workers of a PyTorchJob with a Master get an init
      # container that waits for the master's DNS name. Its default image (alpine:3.10) no
      # registry serves here, so it runs in Nezha's runtime image (busybox sh, seq, nslookup,
      # grep); and busybox 1.35's nslookup exits 1 when any search domain fails even though the
      # name resolved, so the template (otherwise the upstream one) looks for the answer instead.
      cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $src/manifests/overlays/standalone
images:
  - name: ghcr.io/kubeflow/training-v1/training-operator
    newName: ${image%:*}
    newTag: ${image##*:}
configMapGenerator:
  - name: training-operator-pytorch-init
    namespace: kubeflow
    files: [init-container.yaml]
    options:
      disableNameSuffixHash: true
patches:
  - target: {kind: Deployment, name: training-operator}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: add
        path: /spec/template/spec/containers/0/args
        value:
          - --pytorch-init-container-image=$TRAINING_OPERATOR_INIT_IMAGE
          - --pytorch-init-container-template-file=/etc/pytorch-init/init-container.yaml
      - op: add
        path: /spec/template/spec/containers/0/volumeMounts/-
        value: {name: pytorch-init, mountPath: /etc/pytorch-init, readOnly: true}
      - op: add
        path: /spec/template/spec/volumes/-
        value: {name: pytorch-init, configMap: {name: training-operator-pytorch-init}}
YAML
      cat >"$dir/init-container.yaml" <<'YAML'
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}} | grep -q "^Name:"; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
YAML
      ;;
  esac
}

render_manifests() {
  local name=$1 dir="$KF_DIR/kustomize/$1"
  write_kustomization "$name" "$dir"
  mkdir -p "$KF_MANIFESTS"
  # kustomize warns about JobSet's deprecated commonLabels on every run: show its stderr only
  # when it fails.
  "$NEZHA_KUBE_BIN/kubectl" kustomize "$dir" >"$KF_MANIFESTS/$name.yaml.tmp" 2>"$KF_MANIFESTS/$name.err" || {
    cat "$KF_MANIFESTS/$name.err" >&2
    fail "rendering the $name manifests ($dir) failed"
  }
  mv "$KF_MANIFESTS/$name.yaml.tmp" "$KF_MANIFESTS/$name.yaml"
}

cmd=${1:-}
case "$cmd" in
  build)
    require_cmd go jq
    for n in "${NAMES[@]}"; do build_binary "$n"; done
    for n in "${NAMES[@]}"; do build_image "$n"; done
    [ -x "$NEZHA_KUBE_BIN/kubectl" ] || "$REPO/hack/build-kube.sh" envtest >/dev/null
    for n in "${NAMES[@]}"; do render_manifests "$n"; done
    ;;
  images) for n in "${NAMES[@]}"; do echo "$KF_IMAGES/$n.tar"; done ;;
  manifests) for n in "${NAMES[@]}"; do echo "$KF_MANIFESTS/$n.yaml"; done ;;
  -h | --help | help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  *) die "unknown command '$cmd' (want build, images or manifests)" ;;
esac
