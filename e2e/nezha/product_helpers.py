"""Helpers for the product end-to-end test: run repo scripts, kubectl and helm against the local
cluster, and wait for conditions on real objects."""

import json
import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = Path(__file__).resolve().parent / "manifests"
LOCAL_CLUSTER = REPO / "hack" / "local-cluster.sh"
IMAGES_SH = REPO / "hack" / "images.sh"

NEZHA_CACHE = Path(os.environ.get("NEZHA_CACHE", Path.home() / ".cache" / "nezha"))
HELM = NEZHA_CACHE / "tools" / "bin" / "helm"

RELEASE = "nezha"
RELEASE_NAMESPACE = "nezha-system"
# The chart runs the rail agent in a namespace of its own at Pod Security "privileged"
# (docs/install.md "Pod Security").
AGENT_NAMESPACE = RELEASE_NAMESPACE + "-rail-agent"
JOB_NAMESPACE = "default"
RAIL_CLASSES = ["nze-rail0", "nze-rail1"]
# Subnets of the two RailClasses (manifests/railclass-rail*.yaml).
RAIL_SUBNET_PREFIXES = ["10.70.0.", "10.71.0."]

# Bounds on waiting for the cluster to converge (deadlines, not performance assertions).
WAIT_SECONDS = float(os.environ.get("NEZHA_E2E_WAIT_SECONDS", "180"))


def run(args, env=None, check=True, timeout=900, input_text=None):
    """Run a command, returning CompletedProcess; on failure raise with its output attached."""
    proc = subprocess.run(
        [str(a) for a in args], env=env, capture_output=True, text=True, timeout=timeout, input=input_text
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(map(str, args))}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )
    return proc


def cluster_env():
    """The environment with KUBECONFIG and kubectl on PATH, from `local-cluster.sh env`."""
    out = run([LOCAL_CLUSTER, "env"]).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        name, _, value = line[len("export "):].partition("=")
        value = value.strip().strip("'\"")
        env[name] = value.replace("$PATH", os.environ.get("PATH", ""))
    assert "KUBECONFIG" in env, f"`local-cluster.sh env` printed no KUBECONFIG:\n{out}"
    return env


class Kube:
    """kubectl and helm bound to the local cluster's kubeconfig."""

    def __init__(self, env):
        self.env = env

    def kubectl(self, *args, check=True, input_text=None):
        return run(["kubectl", *args], env=self.env, check=check, input_text=input_text)

    def helm(self, *args, check=True):
        return run([HELM, *args], env=self.env, check=check)

    def get(self, kind, name=None, namespace=None, check=True):
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        if namespace:
            args += ["-n", namespace]
        proc = self.kubectl(*args, check=check)
        if proc.returncode != 0:
            return None
        return json.loads(proc.stdout)

    def exists(self, kind, name, namespace=None):
        args = ["get", kind, name, "--ignore-not-found", "-o", "name"]
        if namespace:
            args += ["-n", namespace]
        return self.kubectl(*args).stdout.strip() != ""

    def apply(self, path):
        # Server-side: the MultiRailJob CRD embeds a pod template too large for the
        # client-side last-applied annotation (operator/README.md).
        return self.kubectl("apply", "--server-side", "-f", path)


def wait_for(what, probe, timeout=WAIT_SECONDS, interval=1.0):
    """Poll probe() until it returns a truthy value; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = probe()
        except AssertionError as err:  # a kubectl hiccup while the cluster converges
            last = err
        if last and not isinstance(last, AssertionError):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)


def condition(obj, ctype):
    """The condition of type ctype in obj.status.conditions, or {}."""
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c.get("type") == ctype:
            return c
    return {}


def job_when(kube, name, namespace, phase=None, **conditions):
    """The MultiRailJob when it is in `phase` (if given) with every condition TYPE=STATUS of
    `conditions` (e.g. RailsHealthy="True"); else False. A probe for wait_for."""
    job = kube.get("multirailjob", name, namespace)
    if phase is not None and job.get("status", {}).get("phase") != phase:
        return False
    return all(condition(job, ctype).get("status") == want for ctype, want in conditions.items()) and job


def railnode_rails(kube, node):
    rn = kube.get("railnode", node, check=False) or {}
    return {r["name"]: r for r in rn.get("status", {}).get("rails", [])}


def parse_bench_table(log):
    """Rows of nezha-bench's rank-0 table: size, check word and per-rail bytes.

    A row looks like
      4096  1024  float32  sum  70.1  0.058  0.058  r0=0.00,r1=1.00 ok  [r0=0,r1=4096]
    """
    rows = []
    for line in log.splitlines():
        fields = line.split()
        if len(fields) < 10 or not fields[0].isdigit() or not fields[-1].endswith("]"):
            continue
        rail_bytes = {}
        for item in line[line.rindex("[") + 1 : line.rindex("]")].split(","):
            name, _, value = item.partition("=")
            rail_bytes[name.strip()] = int(value)
        rows.append({"bytes": int(fields[0]), "check": fields[-2], "rail_bytes": rail_bytes})
    return rows


def owned_by(obj, uid):
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences", []))
