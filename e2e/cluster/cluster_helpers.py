"""Shared helpers of the local-cluster end-to-end tests: run hack/local-cluster.sh, drive kubectl
against the cluster it starts. (A uniquely named module, not conftest, so imports never pick up
another suite's conftest.)"""

import json
import os
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LOCAL_CLUSTER = os.path.join(REPO, "hack", "local-cluster.sh")
STATE_DIR = os.environ.get("NEZHA_CLUSTER_DIR", "/var/lib/nezha-cluster")
# An extra CNI plugin handed to `up` (NEZHA_CLUSTER_CNI_PLUGINS): a renamed copy of the macvlan
# reference plugin, which the rail-1 NetworkAttachmentDefinition then uses by that name.
EXTRA_PLUGIN = "nzt-macvlan"


def kube_version():
    """The Kubernetes version the local cluster runs: hack/versions.sh's KUBE_VERSION, which
    NEZHA_KUBE_RELEASE=oldest turns into the oldest the chart claims (`make e2e-oldest`)."""
    return subprocess.run(["bash", "-c", f"source {REPO}/hack/versions.sh && echo $KUBE_VERSION"],
                          capture_output=True, text=True, check=True).stdout.strip()


def local_cluster(*args, check=True, timeout=1800, env=None):
    proc = subprocess.run([LOCAL_CLUSTER, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
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
