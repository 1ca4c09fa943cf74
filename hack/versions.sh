# shellcheck shell=bash
# shellcheck disable=SC2034 # every variable here is used by the scripts that source this file
# Every pinned version Nezha's tooling uses, in one place. Sourced by hack/*.sh and the Makefile.
# Bump here, nowhere else.

# Kubernetes control plane, kubelet and kubectl (built from the Go module proxy).
KUBE_VERSION=v1.33.13
# Staging repos of k8s.io/kubernetes carry the same minor as v0.<minor>.<patch>.
KUBE_STAGING_VERSION=v0.33.13
# The oldest Kubernetes the chart claims (charts/nezha/Chart.yaml kubeVersion). `make
# test-chart-matrix` installs the chart (server-side dry run) into an envtest API server of this
# version as well as of KUBE_VERSION; hack/build-kube.sh envtest-oldest builds its kube-apiserver.
KUBE_OLDEST_VERSION=v1.29.15
KUBE_OLDEST_STAGING_VERSION=v0.29.15
# NEZHA_KUBE_RELEASE=oldest runs everything that uses KUBE_VERSION (the local cluster, envtest,
# kubectl) on KUBE_OLDEST_VERSION instead: `make e2e-oldest`, the product e2e at the bottom of the
# chart's claimed range.
case "${NEZHA_KUBE_RELEASE:-newest}" in
  newest) ;;
  oldest)
    KUBE_VERSION=$KUBE_OLDEST_VERSION
    KUBE_STAGING_VERSION=$KUBE_OLDEST_STAGING_VERSION
    ;;
  *)
    echo "NEZHA_KUBE_RELEASE=${NEZHA_KUBE_RELEASE}: want newest or oldest" >&2
    return 2 # this file is only ever sourced
    ;;
esac
ETCD_VERSION=v3.5.35
CONTROLLER_GEN_VERSION=v0.18.0
HELM_VERSION=v3.17.3
KUBECONFORM_VERSION=v0.6.7
KWOK_VERSION=v0.8.0
MULTUS_VERSION=v4.3.0
# Whereabouts (cluster-wide IPAM for rails on kind): hack/kind.sh.
WHEREABOUTS_VERSION=v0.9.2
COREDNS_VERSION=v1.12.1
TRAINING_OPERATOR_VERSION=v1.9.2
NAD_CLIENT_VERSION=v1.7.6
# crane (github.com/google/go-containerregistry/cmd/crane): `make push`; same as go.mod's module.
CRANE_VERSION=v0.20.3
# kind (sigs.k8s.io/kind): hack/kind.sh.
KIND_VERSION=v0.33.0
# kube-score (github.com/zegl/kube-score): `make lint-chart` checks the rendered chart with it.
KUBE_SCORE_VERSION=v1.20.0

# Where builds and downloads are cached between runs (outside the work tree so `git clean`
# and fresh checkouts reuse them).
NEZHA_CACHE=${NEZHA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nezha}
NEZHA_TOOLS_BIN="$NEZHA_CACHE/tools/bin"
NEZHA_KUBE_BIN="$NEZHA_CACHE/kube-$KUBE_VERSION/bin"
NEZHA_KUBE_OLDEST_BIN="$NEZHA_CACHE/kube-$KUBE_OLDEST_VERSION/bin"
# Kubeflow controllers the Trainer v2 / PyTorchJob e2e runs (hack/kubeflow.sh builds them from the
# Go module proxy). Trainer v2.3.0 requires JobSet v0.12.0 in its go.mod; the legacy PyTorchJob
# controller is training-operator $TRAINING_OPERATOR_VERSION (the same module as the API types).
TRAINER_VERSION=v2.3.0
JOBSET_VERSION=v0.12.0

# PyTorch the `nezha` c10d backend is built and tested against (a venv under $NEZHA_CACHE,
# made by hack/setup-torch.sh).
TORCH_VERSION=2.15.0
NEZHA_TORCH_VENV="$NEZHA_CACHE/venv-torch-$TORCH_VERSION"
