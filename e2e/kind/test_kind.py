"""Nezha on a real 3-node kind cluster (hack/kind.sh): two rails as Docker networks attached to
every node, Multus and whereabouts, the chart installed by the script; a MultiRailJob whose two
workers run on different nodes allreduces over both rails, and keeps going when one rail is cut on
one node mid-run.

Run: make e2e-kind (in Nezha's sandbox with NEZHA_KIND_SANDBOX=1; see e2e/kind/conftest.py)."""

import json
import subprocess

import pytest

from product_helpers import REPO, condition, owned_by, parse_bench_table, railnode_rails, wait_for

EXAMPLES = REPO / "examples" / "kind"
RAILS = ["kind-rail0", "kind-rail1"]
RAIL_IFACES = ["eth1", "eth2"]
RAIL_PREFIXES = ["172.31.0.", "172.31.1."]
NAMESPACE = "default"
RELEASE_NAMESPACE = "nezha-system"


def job_manifest(name, sizes, iters):
    """Two workers on two different nodes (anti-affinity on the operator's job label) running
    nezha-bench over both kind rails."""
    return {
        "apiVersion": "nezha.io/v1alpha1",
        "kind": "MultiRailJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"nezha-e2e": "kind"}},
        "spec": {
            "rails": RAILS,
            "workers": {
                "replicas": 2,
                "template": {"spec": {
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"nezha.io/job-name": name}},
                        "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{
                        "name": "bench",
                        "image": "nezha/runtime:0.1.0",
                        "imagePullPolicy": "Never",
                        "command": ["/opt/nezha/bin/nezha-bench"],
                        "args": ["--op", "allreduce", "--check", "--min-bytes", sizes[0], "--max-bytes", sizes[1],
                                 "--factor", "4", "--warmup", "2", "--iters", str(iters)],
                        "env": [{"name": "NEZHA_IO_TIMEOUT_MS", "value": "3000"}],
                    }],
                }},
            },
            "runtime": {"policy": "adaptive", "injectRuntime": True},
            "failurePolicy": {"minHealthyRails": 1, "onRailLoss": "ContinueDegraded"},
        },
    }


def worker_nodes(kube):
    return sorted(n["metadata"]["name"] for n in kube.get("nodes")["items"]
                  if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {}))


@pytest.fixture(scope="module")
def rails(kube):
    for i in range(len(RAILS)):
        kube.apply(EXAMPLES / f"railclass-rail{i}.yaml")
    yield RAILS
    kube.kubectl("delete", "multirailjobs", "-n", NAMESPACE, "-l", "nezha-e2e=kind", "--wait=true", check=False)


def finished(kube, name):
    job = kube.get("multirailjob", name, NAMESPACE)
    return job.get("status", {}).get("phase") in ("Succeeded", "Failed") and job


def test_three_nodes_ready_each_with_both_rail_interfaces(kube):
    nodes = kube.get("nodes")["items"]
    assert len(nodes) == 3
    for node in nodes:
        assert condition(node, "Ready")["status"] == "True", node["status"]["conditions"]
        for iface in RAIL_IFACES:
            out = subprocess.run(["docker", "exec", node["metadata"]["name"], "ip", "-o", "link", "show", iface],
                                 capture_output=True, text=True, check=True).stdout
            assert "state UP" in out, out


def test_chart_runs_the_operator_and_an_agent_on_every_node(kube):
    def ready():
        dep = kube.get("deployments", namespace=RELEASE_NAMESPACE)["items"]
        ds = kube.get("daemonsets", namespace=RELEASE_NAMESPACE)["items"]
        ok = (dep and all(d["status"].get("availableReplicas", 0) >= 1 for d in dep)
              and ds and all(d["status"].get("numberReady", 0) == 3 for d in ds))
        return ok and (dep, ds)
    wait_for("the operator and three agents to be ready", ready)


def test_railnodes_show_both_rails_up_on_the_workers(kube, rails):
    for node in worker_nodes(kube):
        def both_up(node=node):
            found = railnode_rails(kube, node)
            return all(found.get(r, {}).get("operState") == "up" for r in rails) and found
        found = wait_for(f"RailNode {node} to list both rails up", both_up)
        assert [found[r]["interface"] for r in rails] == RAIL_IFACES


def test_job_on_two_nodes_allreduces_over_both_rails(kube, rails):
    name = "kind-allreduce"
    kube.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(job_manifest(name, ("4K", "4M"), 5)))
    job = wait_for(f"MultiRailJob {name} to finish", lambda: finished(kube, name), timeout=300)
    pods = sorted((p for p in kube.get("pods", namespace=NAMESPACE)["items"] if owned_by(p, job["metadata"]["uid"])),
                  key=lambda p: p["metadata"]["name"])
    logs = kube.kubectl("logs", "-n", NAMESPACE, pods[0]["metadata"]["name"], "-c", "bench").stdout
    assert job["status"]["phase"] == "Succeeded", f"{job['status']}\nrank 0 log:\n{logs}"
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, [p["spec"]["nodeName"] for p in pods]
    for pod in pods:
        status = json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
        ifaces = {n["interface"]: n["ips"] for n in status if "interface" in n}
        for i, prefix in enumerate(RAIL_PREFIXES):
            assert ifaces[f"nz{i}"][0].startswith(prefix), (pod["metadata"]["name"], ifaces)
    rows = parse_bench_table(logs)
    assert rows and all(r["check"] == "ok" for r in rows), logs
    large = [r for r in rows if r["bytes"] >= 1 << 20]
    assert large and all(r["rail_bytes"].get(rail, 0) > 0 for r in large for rail in RAILS), logs


def test_rail_cut_on_one_node_mid_run_keeps_the_job_alive(kube, rails):
    name = "kind-chaos"
    kube.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(job_manifest(name, ("16M", "16M"), 400)))
    cut_node = None
    try:
        def rank0_measuring():
            proc = kube.kubectl("logs", "-n", NAMESPACE, f"{name}-0", "-c", "bench", check=False)
            return proc.returncode == 0 and "nezha-bench allreduce" in proc.stdout
        wait_for(f"{name} rank 0 to start measuring", rank0_measuring, timeout=300, interval=0.5)
        cut_node = kube.get("pod", f"{name}-1", NAMESPACE)["spec"]["nodeName"]
        subprocess.run(["docker", "exec", cut_node, "ip", "link", "set", RAIL_IFACES[1], "down"], check=True)
        job = wait_for(f"{name} to finish with rail 1 cut on {cut_node}", lambda: finished(kube, name), timeout=600)
        logs = kube.kubectl("logs", "-n", NAMESPACE, f"{name}-0", "-c", "bench").stdout
        assert job["status"]["phase"] == "Succeeded", f"{condition(job, 'Failed')}\nrank 0 log:\n{logs}"
        assert condition(job, "Degraded").get("status") == "True", job["status"]
        rows = parse_bench_table(logs)
        assert [r["check"] for r in rows] == ["ok"], logs
        # The last (checked) operation ran entirely on the surviving rail.
        assert rows[0]["rail_bytes"] == {RAILS[0]: rows[0]["bytes"], RAILS[1]: 0}, logs
    finally:
        if cut_node:
            subprocess.run(["docker", "exec", cut_node, "ip", "link", "set", RAIL_IFACES[1], "up"], check=True)
        kube.kubectl("delete", "multirailjob", name, "-n", NAMESPACE, "--wait=true", check=False)
