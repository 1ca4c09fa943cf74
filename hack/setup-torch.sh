#!/usr/bin/env bash
# Creates the pinned PyTorch venv the `nezha` c10d backend is built and tested with:
# $NEZHA_TORCH_VENV (torch==$TORCH_VERSION from PyPI with its nvidia-* wheels, which torch needs
# even to import on CPU; ~5.4 GB) plus pytest, numpy and the build tooling of runtime/python.
# Idempotent: a venv whose stamp matches the pinned list is left alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
log() { echo "setup-torch: $*" >&2; }

PACKAGES=("torch==$TORCH_VERSION" "numpy" "pytest" "scikit-build-core" "pybind11" "ninja" "cmake")
stamp="$NEZHA_TORCH_VENV/.nezha-stamp"
want="${PACKAGES[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$NEZHA_TORCH_VENV/bin/python" -c "import torch" 2>/dev/null; then
  exit 0
fi
log "creating $NEZHA_TORCH_VENV ($want)"
# Debian's interpreter (python3-venv), not whatever is first on PATH, so CI and hosts agree.
/usr/bin/python3 -m venv "$NEZHA_TORCH_VENV"
"$NEZHA_TORCH_VENV/bin/python" -m pip install -q --upgrade pip
"$NEZHA_TORCH_VENV/bin/python" -m pip install -q "${PACKAGES[@]}"
echo "$want" >"$stamp"
log "ok ($("$NEZHA_TORCH_VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
