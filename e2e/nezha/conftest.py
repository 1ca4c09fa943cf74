"""Fixtures for the product end-to-end test: the local cluster (brought up only if it is not up,
and taken down at the end only if this session brought it up), the three images built and
loaded, and the Helm release installed the way a user installs it."""

import os
import subprocess
import time

import pytest

from product_helpers import (
    HELM,
    IMAGES_SH,
    JOB_NAMESPACE,
    LOCAL_CLUSTER,
    RAIL_CLASSES,
    RELEASE,
    RELEASE_NAMESPACE,
    REPO,
    Kube,
    cluster_env,
    run,
)

# How long to wait for another session's cluster tests (e2e/cluster brings the one cluster this
# machine can run up and down) before giving up.
OTHER_USER_WAIT_SECONDS = float(os.environ.get("NEZHA_E2E_CLUSTER_WAIT_SECONDS", "1200"))


def other_cluster_tests():
    """PIDs of other pytest runs of e2e/cluster (they take the local cluster down when done)."""
    out = subprocess.run(["pgrep", "-af", "pytest"], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()
        if "e2e/cluster" in line and int(line.split()[0]) != os.getpid()
    ]


@pytest.fixture(scope="session")
def cluster():
    """Environment (KUBECONFIG, PATH, NEZHA_*) of a running local cluster."""
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root")
    assert HELM.exists(), f"helm missing at {HELM} (run hack/setup.sh)"
    deadline = time.monotonic() + OTHER_USER_WAIT_SECONDS
    while other_cluster_tests():
        if time.monotonic() > deadline:
            pytest.fail(f"the local cluster is still in use by: {other_cluster_tests()}")
        time.sleep(10)
    status = run([LOCAL_CLUSTER, "status"], check=False)
    brought_up = status.returncode != 0
    if brought_up:
        if status.returncode != 3:  # degraded: clean up what is left, then start fresh
            run([LOCAL_CLUSTER, "down"])
        run([LOCAL_CLUSTER, "up"])
    try:
        yield cluster_env()
    finally:
        if brought_up:
            run([LOCAL_CLUSTER, "down"], check=False)


@pytest.fixture(scope="session")
def kube(cluster):
    return Kube(cluster)


@pytest.fixture(scope="session")
def images(cluster):
    """Build the three images (hack/images.sh) and import them into the cluster's containerd."""
    # Always (ninja makes it a no-op when nothing changed): the images must carry this tree's
    # runtime, NCCL plugin and harness, never a stale build's.
    run(["make", "-C", REPO, "build-runtime"], timeout=1800)
    run([IMAGES_SH], timeout=1800)
    tarballs = run([IMAGES_SH, "--list"]).stdout.split()
    for tarball in tarballs:
        run([LOCAL_CLUSTER, "load-image", tarball])
    return tarballs


def remove_leftovers(kube):
    """What an interrupted earlier run may have left: our jobs, rail classes, the release."""
    kube.kubectl("delete", "multirailjobs", "-n", JOB_NAMESPACE, "-l", "nezha-e2e=product",
                 "--ignore-not-found", "--wait=true", check=False)
    kube.kubectl("delete", "railclasses", *RAIL_CLASSES, "--ignore-not-found", check=False)
    if kube.helm("status", RELEASE, "-n", RELEASE_NAMESPACE, check=False).returncode == 0:
        kube.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait")


def install_release(kube):
    """`helm install nezha charts/nezha` as a user would, with the plugin going to the local
    cluster's CNI bin dir."""
    kube.helm(
        "install", RELEASE, REPO / "charts" / "nezha",
        "-n", RELEASE_NAMESPACE, "--create-namespace",
        "--set", "image.pullPolicy=Never",
        "--set", f"cni.binDir={kube.env['NEZHA_CNI_BIN_DIR']}",
        # These tests cut the same rail of the one node several times within minutes, on purpose:
        # with quarantine by evidence on (3 failures in 10 min) the operator would rightly
        # quarantine it and keep later jobs off the only node. Quarantine by evidence is tested
        # against a real API server in operator/internal/controller (railnode_quarantine_test.go).
        "--set", "operator.quarantine.failures=0",
    )


@pytest.fixture(scope="session")
def release(kube, images):
    """The release, installed once per session; uninstalled at the end unless a test already did."""
    remove_leftovers(kube)
    install_release(kube)
    state = {"installed": True}
    yield state
    if state["installed"]:
        remove_leftovers(kube)


@pytest.fixture(scope="module")
def installed_release(kube, release):
    """The release, installed again if an earlier module (test_product's uninstall test) removed
    it: modules must not depend on the order pytest runs them in."""
    if not release["installed"]:
        install_release(kube)
        release["installed"] = True
    return release
