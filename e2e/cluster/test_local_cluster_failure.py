"""Failure paths: a failed `up` and a `down` after crashes leave the host as `up` found it."""

import os
import signal
import socket
import subprocess

import pytest

import cluster_host_state as host_state
from cluster_helpers import LOCAL_CLUSTER, STATE_DIR, Cluster, local_cluster


def test_failed_up_cleans_up_and_names_the_component(require_root):
    if os.path.exists(STATE_DIR):
        pytest.fail(f"{STATE_DIR} exists: a local cluster is already up")
    # Take the apiserver's port first: kube-apiserver exits at once, `up` must notice that
    # (not wait out its timeout), say which component failed, and undo everything.
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    before = host_state.snapshot(STATE_DIR)
    try:
        proc = subprocess.run([LOCAL_CLUSTER, "up"], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "NEZHA_CLUSTER_API_PORT": str(port)})
    finally:
        blocker.close()
    assert proc.returncode != 0
    assert "kube-apiserver exited before kube-apiserver ready" in proc.stderr, proc.stderr
    assert "address already in use" in proc.stderr, proc.stderr  # the log tail was shown
    diffs = host_state.differences(before, host_state.snapshot(STATE_DIR))
    assert not diffs, "the host differs after a failed up:\n" + "\n".join(diffs)


# Hard-coded directories another Kubernetes or CNI user on the host could own. The crash test
# creates the missing ones first, so `down` must remove only the cluster's files inside them.
SHARED_DIRS = ["/var/lib/cni/results", "/var/log/containers", "/run/containerd/s",
               "/var/lib/kubelet/device-plugins"]


@pytest.fixture
def preexisting_shared_dirs():
    created = []
    for d in SHARED_DIRS:
        parts = d.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if not os.path.exists(p):
                os.mkdir(p)
                created.append(p)
    yield
    for p in reversed(created):
        os.rmdir(p)  # fails, and so fails the test, if something was left inside


def test_down_after_kubelet_and_containerd_crashed(require_root, preexisting_shared_dirs):
    """The slow path of `down`: no kubelet to drain pods, no containerd to stop containers.
    Whatever is left (shims, pause processes, cni-* netns, mounts, cgroups, CNI caches, log
    links, shim sockets) must still go, while directories that existed before stay."""
    if os.path.exists(STATE_DIR):
        pytest.fail(f"{STATE_DIR} exists: a local cluster is already up")
    before = host_state.snapshot(STATE_DIR)
    try:
        local_cluster("up")
        cluster = Cluster()
        cluster.kubectl("run", "nzt-crash", "--image", "nezha.local/pause:1", "--image-pull-policy", "Never",
                        "--restart", "Never")
        cluster.wait_ready("nzt-crash")
        for component in ("kubelet", "containerd"):
            with open(os.path.join(STATE_DIR, "pids", f"{component}.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        assert local_cluster("status", check=False).returncode != 0
    finally:
        local_cluster("down")
    diffs = host_state.differences(before, host_state.snapshot(STATE_DIR))
    assert not diffs, "the host differs after down:\n" + "\n".join(diffs)


def test_racing_ups_leave_one_working_cluster(require_root):
    """Two `up`s at once (two suites, two terminals): one wins, the other fails without touching
    the winner's cluster, and `down` still restores the host."""
    if os.path.exists(STATE_DIR):
        pytest.fail(f"{STATE_DIR} exists: a local cluster is already up")
    before = host_state.snapshot(STATE_DIR)
    try:
        procs = [subprocess.Popen([LOCAL_CLUSTER, "up"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
        codes = sorted(rc for rc, _ in results)
        assert codes[0] == 0 and codes[1] != 0, results
        loser = [err for rc, err in results if rc != 0][0]
        assert "another up is using" in loser or "a cluster is running" in loser, loser
        assert "tearing down" not in loser, loser
        assert local_cluster("status").returncode == 0
    finally:
        local_cluster("down")
    diffs = host_state.differences(before, host_state.snapshot(STATE_DIR))
    assert not diffs, "the host differs after down:\n" + "\n".join(diffs)
