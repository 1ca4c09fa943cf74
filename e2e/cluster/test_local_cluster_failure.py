"""A failed `up` tears down what it started and leaves the host as it found it."""

import os
import socket
import subprocess

import pytest

import cluster_host_state as host_state
from cluster_helpers import LOCAL_CLUSTER, STATE_DIR


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
