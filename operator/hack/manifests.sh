#!/usr/bin/env bash
# Regenerates the operator's deepcopy code, CRDs and RBAC from its Go markers: the one command
# both `make manifests` and the staleness test (operator/generated_test.go) run.
#
#   operator/hack/manifests.sh                      # write into the tree
#   operator/hack/manifests.sh CRD_DIR RBAC_DIR OBJ_DIR   # write elsewhere (for diffing; each
#                                                         # API package's deepcopy code lands in
#                                                         # OBJ_DIR/<its path under operator/api>)
#
# CONTROLLER_GEN overrides the binary (default: the pinned one `make setup` installs).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../hack/versions.sh
source "$root/hack/versions.sh"
cg=${CONTROLLER_GEN:-$NEZHA_TOOLS_BIN/controller-gen}
if [[ ! -x $cg ]]; then
  echo "manifests.sh: controller-gen $CONTROLLER_GEN_VERSION not found at $cg (run make setup)" >&2
  exit 1
fi

crd_dir=${1:-config/crd/bases}
rbac_dir=${2:-config/rbac}
obj_dir=${3:-}

cd "$root"
# One run per API package: with an output directory each needs its own.
for pkg in v1alpha1 config/v1alpha1; do
  obj_out=()
  if [[ -n $obj_dir ]]; then
    mkdir -p "$obj_dir/$pkg"
    obj_out=("output:object:dir=$obj_dir/$pkg")
  fi
  "$cg" object paths="./operator/api/$pkg" "${obj_out[@]}"
done
# generateEmbeddedObjectMeta keeps labels/annotations of the worker pod template from being pruned.
"$cg" crd:generateEmbeddedObjectMeta=true rbac:roleName=nezha-operator paths=./operator/... \
  output:crd:artifacts:config="$crd_dir" output:rbac:artifacts:config="$rbac_dir"
# The worker pod template's copy of core/v1's documentation makes the CRD too large for a plain
# client-side `kubectl apply` (256 KiB annotation limit); Nezha's own field docs stay.
go run ./hack/tools/crdtrim "$crd_dir/nezha.io_multirailjobs.yaml" spec.workers.template
