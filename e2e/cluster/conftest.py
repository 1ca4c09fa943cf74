"""Fixtures for the local-cluster end-to-end tests: one cluster per module, brought up once and
always torn down, plus a snapshot of the host taken before `up`."""

import json
import os
import subprocess
import time

import pytest

import host_state

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LOCAL_CLUSTER = os.path.join(REPO, "hack", "local-cluster.sh")
STATE_DIR = os.environ.get("NEZHA_CLUSTER_DIR", "/var/lib/nezha-cluster")


def local_cluster(*args, check=True, timeout=1800):
    proc = subprocess.run([LOCAL_CLUSTER, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"local-cluster.sh {' '.join(args)} failed rc={proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


class Cluster:
    """Handle on the running cluster: kubectl with its kubeconfig, image loading."""

    def __init__(self):
        env = {}
        for line in local_cluster("env").stdout.splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
        self.kubeconfig = env["KUBECONFIG"]
        self.kubectl_bin = env["NEZHA_KUBECTL"]
        self.node = env["NEZHA_CLUSTER_NODE"]
        self.rails = env["NEZHA_CLUSTER_RAIL_IFACES"].split(",")

    def kubectl(self, *args, input=None, check=True, timeout=120):
        proc = subprocess.run([self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def apply(self, obj):
        return self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def wait_ready(self, pod, timeout=120):
        self.kubectl("wait", "--for=condition=Ready", f"pod/{pod}", f"--timeout={timeout}s", timeout=timeout + 10)


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
def cluster_run(host_before):
    """Brings the cluster up once for the module; `down` runs at the end even if tests failed
    (test_down_restores_the_host normally does it first, which makes this a no-op)."""
    started = time.monotonic()
    local_cluster("up")
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
