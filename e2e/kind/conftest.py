"""Fixtures of the kind end-to-end test: a 3-node kind cluster with two rails made by
hack/kind.sh (brought up only if it is not there, deleted at the end only if this session made it,
unless NEZHA_KIND_KEEP=1), the three images loaded and the chart installed by the script.

In Nezha's development sandbox set NEZHA_KIND_SANDBOX=1 (hack/kind-sandbox/README.md); on an
ordinary Docker host leave it unset and kind's own node image is used."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nezha"))

from product_helpers import REPO, Kube, run  # noqa: E402

KIND_SH = REPO / "hack" / "kind.sh"
KEEP = os.environ.get("NEZHA_KIND_KEEP", "0") == "1"
REQUIRED = os.environ.get("NEZHA_KIND_REQUIRED", "0") == "1"


def kind_env():
    kubeconfig = run([KIND_SH, "kubeconfig"]).stdout.strip()
    kube_bin = run(["bash", "-c", f'source "{REPO}/hack/versions.sh"; echo "$NEZHA_KUBE_BIN"']).stdout.strip()
    env = dict(os.environ, KUBECONFIG=kubeconfig, PATH=f"{kube_bin}:{os.environ['PATH']}")
    return env


def cluster_exists():
    proc = subprocess.run(["docker", "ps", "-q", "--filter", "label=io.x-k8s.kind.cluster=" +
                           os.environ.get("NEZHA_KIND_NAME", "nezha")], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() != ""


@pytest.fixture(scope="session")
def kind_cluster():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        # `make e2e-kind` asks for kind by name: no Docker is then an error, not a skip.
        if REQUIRED:
            pytest.fail("kind needs a running Docker engine: `docker info` failed (NEZHA_KIND_REQUIRED=1)")
        pytest.skip("kind needs a running Docker engine")
    if not (REPO / "build" / "runtime" / "nezha-bench").exists():
        run(["make", "-C", REPO, "build-runtime"], timeout=1800)
    run([REPO / "hack" / "images.sh"], timeout=1800)
    made = not cluster_exists()
    # `up` is idempotent: it makes what is missing and (re)installs the chart.
    run([KIND_SH, "up"], timeout=3600)
    try:
        yield kind_env()
    finally:
        if made and not KEEP:
            run([KIND_SH, "down"], check=False)


@pytest.fixture(scope="session")
def kube(kind_cluster):
    return Kube(kind_cluster)
