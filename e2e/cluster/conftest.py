"""Fixtures for the local-cluster end-to-end tests: one cluster per module, brought up once and
always torn down, plus a snapshot of the host taken before `up`."""

import os
import shutil
import subprocess
import time

import pytest

import cluster_host_state as host_state
from cluster_helpers import EXTRA_PLUGIN, REPO, STATE_DIR, Cluster, local_cluster


@pytest.fixture(scope="session")
def require_root():
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root")


@pytest.fixture(scope="module")
def host_before(require_root):
    if os.path.exists(STATE_DIR):
        pytest.fail(f"{STATE_DIR} exists: a local cluster is already up; run hack/local-cluster.sh down")
    return host_state.snapshot(STATE_DIR)


@pytest.fixture(scope="module")
def cluster_run(host_before, tmp_path_factory):
    """Brings the cluster up once for the module; `down` runs at the end even if tests failed
    (test_down_restores_the_host normally does it first, which makes this a no-op)."""
    plugin = tmp_path_factory.mktemp("cni") / EXTRA_PLUGIN
    shutil.copy2("/usr/lib/cni/macvlan", plugin)
    started = time.monotonic()
    local_cluster("up", env={"NEZHA_CLUSTER_CNI_PLUGINS": str(plugin)})
    print(f"local-cluster.sh up took {time.monotonic() - started:.1f}s")
    state = {"up": True}
    yield state
    if state["up"]:
        local_cluster("down", check=False)


@pytest.fixture
def cluster(cluster_run):
    if not cluster_run["up"]:
        pytest.fail("the cluster was already taken down by an earlier test")
    return Cluster()


@pytest.fixture(scope="module")
def imagebuilder(tmp_path_factory):
    out = tmp_path_factory.mktemp("imagebuilder") / "imagebuilder"
    subprocess.run(["go", "build", "-o", str(out), "./hack/imagebuilder"], cwd=REPO, check=True)
    return str(out)
