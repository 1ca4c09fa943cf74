"""The whole product as a user runs it, on the real local cluster: `helm install` the chart, define
two rails, run a MultiRailJob whose workers allreduce across both rails, cut a rail on the host,
delete the job, uninstall. Tests run in file order and build on each other (one cluster, one
release), like the steps of a user's session."""

import hashlib
import json
import subprocess

import pytest

from product_helpers import (
    AGENT_NAMESPACE,
    JOB_NAMESPACE,
    MANIFESTS,
    RAIL_CLASSES,
    RAIL_SUBNET_PREFIXES,
    RELEASE,
    RELEASE_NAMESPACE,
    REPO,
    condition,
    job_when,
    owned_by,
    parse_bench_table,
    railnode_rails,
    wait_for,
)

OPERATOR = "nezha-operator"
AGENT = "nezha-rail-agent"
BENCH_JOB = "nze-allreduce"
LONG_JOB = "nze-long"
OUTAGE_JOB = "nze-outage"
CHAOS_JOB = "nze-chaos"
STEER_JOB = "nze-steer"
NCCL_STEER_JOB = "nze-nccl-steer"
PREFLIGHT_JOB = "nze-preflight"
# Time the operator gets to bring outage-era workers onto a recovered node (it reconciles on
# RailNode changes, so this is generous).
OUTAGE_RECOVERY_SECONDS = 60
# nezha-bench sizes of manifests/job.yaml: 4K..4M, factor 4.
BENCH_SIZES = [4096 * 4**i for i in range(6)]
LARGE = 4 * 1024 * 1024


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def chart_app_version():
    for line in (REPO / "charts" / "nezha" / "Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError("charts/nezha/Chart.yaml has no appVersion")


def node_name(kube):
    return kube.env["NEZHA_CLUSTER_NODE"]


def rail_links(kube):
    return kube.env["NEZHA_CLUSTER_RAIL_IFACES"].split(",")


@pytest.fixture(scope="module")
def rails(kube, release):
    for i in range(len(RAIL_CLASSES)):
        kube.apply(MANIFESTS / f"railclass-rail{i}.yaml")
    return RAIL_CLASSES


def test_chart_installs_operator_and_agent_and_plugin(kube, release):
    def deployment_available():
        d = kube.get("deployment", OPERATOR, RELEASE_NAMESPACE)
        return condition(d, "Available").get("status") == "True" and d
    wait_for("the operator Deployment Available", deployment_available)

    def daemonset_ready():
        ds = kube.get("daemonset", AGENT, AGENT_NAMESPACE)
        st = ds.get("status", {})
        want = st.get("desiredNumberScheduled", 0)
        return want > 0 and st.get("numberReady") == want and st.get("updatedNumberScheduled") == want and ds
    wait_for("the rail agent DaemonSet ready", daemonset_ready)

    # The install-cni init container put the plugin where Multus looks for it, and it is the very
    # binary packed into the rail-agent image.
    installed = f"{kube.env['NEZHA_CNI_BIN_DIR']}/nezha-rail"
    packed = REPO / "build" / "images" / "stage" / "rail-agent" / "nezha-rail"
    assert sha256(installed) == sha256(packed), f"{installed} is not the nezha-rail of the rail-agent image"
    version = subprocess.run([installed], env={"CNI_COMMAND": "VERSION"}, input="{}",
                             capture_output=True, text=True)
    assert version.returncode == 0 and "supportedVersions" in version.stdout, version


def test_helm_test_hook_finds_operator_and_agents_healthy(kube, release):
    # `helm test`: the chart's test pod reads the operator's /readyz and every agent's /healthz.
    # The pod succeeds only if every check passed; on success Helm deletes it (hook-succeeded, so
    # `helm uninstall` leaves nothing behind), on failure it stays and its log explains why.
    # No --logs: Helm 3 deletes a succeeded hook pod before it would fetch them (helm#9098).
    proc = kube.helm("test", RELEASE, "-n", RELEASE_NAMESPACE, "--timeout", "2m", check=False)
    logs = "" if proc.returncode == 0 else kube.kubectl(
        "logs", "-n", RELEASE_NAMESPACE, f"{RELEASE}-test-health", check=False).stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    assert "Phase:          Succeeded" in proc.stdout, proc.stdout
    assert not kube.exists("pod", f"{RELEASE}-test-health", RELEASE_NAMESPACE)


def test_railnode_shows_both_rails_up(kube, rails):
    def both_up():
        found = railnode_rails(kube, node_name(kube))
        ok = all(found.get(r, {}).get("operState") == "up" and found[r].get("carrier") for r in rails)
        return ok and found
    found = wait_for("the RailNode to list both rails up", both_up)
    assert [found[r]["interface"] for r in rails] == rail_links(kube)
    rn = kube.get("railnode", node_name(kube))
    assert rn["status"]["healthyRailCount"] == 2
    # Written by the agent of this release's image (hack/images.sh stamps the tag into it).
    assert rn["status"]["agentVersion"] == chart_app_version()
    assert condition(rn, "InterfacesResolved")["status"] == "True"


def test_job_allreduces_across_both_rails(kube, rails):
    kube.apply(MANIFESTS / "job.yaml")

    def finished():
        job = kube.get("multirailjob", BENCH_JOB, JOB_NAMESPACE)
        return job.get("status", {}).get("phase") in ("Succeeded", "Failed") and job
    job = wait_for(f"MultiRailJob {BENCH_JOB} to finish", finished)
    pods = sorted(
        (p for p in kube.get("pods", namespace=JOB_NAMESPACE)["items"] if owned_by(p, job["metadata"]["uid"])),
        key=lambda p: p["metadata"]["name"],
    )
    logs = kube.kubectl("logs", "-n", JOB_NAMESPACE, pods[0]["metadata"]["name"], "-c", "bench").stdout
    assert job["status"]["phase"] == "Succeeded", f"job {job['status']}\nrank 0 log:\n{logs}"
    assert condition(job, "Succeeded")["status"] == "True"
    assert len(pods) == 2

    # Every worker got one interface per rail (nz<i>, the operator's contract) with an address from
    # that rail's subnet, and the job's status reports the same addresses.
    by_pod = {}
    for pod in pods:
        status = json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
        ifaces = {n["interface"]: n["ips"] for n in status if "interface" in n}
        for i, prefix in enumerate(RAIL_SUBNET_PREFIXES):
            assert f"nz{i}" in ifaces, f"{pod['metadata']['name']} has no nz{i}: {status}"
            assert ifaces[f"nz{i}"][0].startswith(prefix), (pod["metadata"]["name"], ifaces)
        assert pod["metadata"]["annotations"]["nezha.io/rails"] == "nze-rail0=nz0:tcp@10000,nze-rail1=nz1:tcp@10000"  # expectedBandwidthMbps of the RailClasses
        assert any(c["name"] == "nezha-runtime-install" for c in pod["spec"].get("initContainers", []))
        by_pod[pod["metadata"]["name"]] = [ifaces[f"nz{i}"] for i in range(len(RAIL_SUBNET_PREFIXES))]
    # The job's status summarises (per-worker detail stays on the pods): both workers counted,
    # every rail attached on both and healthy, no worker listed as unhealthy.
    status = job["status"]
    assert status["workerCounts"]["pods"] == 2 and status["workerCounts"]["succeeded"] == 2, status
    assert [(r["name"], r["attachedWorkers"], r["state"]) for r in status["rails"]] == [
        (name, 2, "Healthy") for name in RAIL_CLASSES], status["rails"]
    assert not status.get("unhealthyWorkers") and not status["workerCounts"].get("unhealthy"), status

    # nezha-bench ran on both rails through the injected interfaces, checked every size, and the
    # large ones moved bytes on both rails.
    header = logs.splitlines()[0]
    assert "2 ranks" in header and "nze-rail0=nz0(tcp" in header and "nze-rail1=nz1(tcp" in header, header
    rows = parse_bench_table(logs)
    assert [r["bytes"] for r in rows] == BENCH_SIZES, logs
    assert all(r["check"] == "ok" for r in rows), logs
    for row in rows:
        assert sum(row["rail_bytes"].values()) == row["bytes"], row
        if row["bytes"] >= LARGE:
            assert all(row["rail_bytes"].get(r, 0) > 0 for r in RAIL_CLASSES), f"one rail idle: {row}"


def test_rail_cut_flips_railnode_and_job_conditions(kube, rails):
    kube.apply(MANIFESTS / "job-long.yaml")

    def running_healthy():
        job = kube.get("multirailjob", LONG_JOB, JOB_NAMESPACE)
        ok = (job.get("status", {}).get("phase") == "Running"
              and condition(job, "RailsHealthy").get("status") == "True"
              and condition(job, "RailsVerified").get("status") == "True")
        return ok and job
    job = wait_for(f"{LONG_JOB} Running with RailsHealthy", running_healthy)

    # nezha-rail ran chained after macvlan: each worker routes from each rail address through
    # that rail's own table. (The addresses are each pod's Multus network-status.)
    assert job["status"]["workerCounts"]["running"] == 2 and not job["status"].get("unhealthyWorkers"), job["status"]
    for pod in kube.get("pods", namespace=JOB_NAMESPACE)["items"]:
        if not owned_by(pod, job["metadata"]["uid"]):
            continue
        name = pod["metadata"]["name"]
        status = json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
        ips = {n["interface"]: n["ips"] for n in status if "interface" in n}
        rules = kube.kubectl("exec", "-n", JOB_NAMESPACE, name, "--", "ip", "rule").stdout
        for i in range(len(RAIL_CLASSES)):
            assert f"from {ips[f'nz{i}'][0]} lookup" in rules, f"{name} nz{i}:\n{rules}"

    cut_link, cut_rail = rail_links(kube)[1], RAIL_CLASSES[1]
    subprocess.run(["ip", "link", "set", cut_link, "down"], check=True)
    try:
        def rail_down():
            found = railnode_rails(kube, node_name(kube))
            return found.get(cut_rail, {}).get("operState") == "down" and found
        wait_for(f"the RailNode to show {cut_rail} down", rail_down)
        assert kube.get("railnode", node_name(kube))["status"]["healthyRailCount"] == 1

        def job_degraded():
            job = kube.get("multirailjob", LONG_JOB, JOB_NAMESPACE)
            ok = (condition(job, "RailsHealthy").get("status") == "False"
                  and condition(job, "Degraded").get("status") == "True")
            return ok and job
        job = wait_for(f"{LONG_JOB} RailsHealthy=False and Degraded=True", job_degraded)
        # ContinueDegraded with minHealthyRails 1: the job keeps its workers on the other rail.
        assert job["status"]["phase"] == "Degraded", job["status"]
        # The rail's summary names the node; both workers (one node) are listed with the reason.
        cut = next(r for r in job["status"]["rails"] if r["name"] == cut_rail)
        assert cut["state"] == "Down" and cut["downNodes"] == [node_name(kube)] and cut["downWorkers"] == 2, cut
        listed = job["status"].get("unhealthyWorkers", [])
        assert [w["reason"] for w in listed] == [f"rail {cut_rail} down on node {node_name(kube)}"] * 2, listed
        lost = [f["action"] for f in job["status"].get("failoverHistory", []) if f.get("rail") == cut_rail]
        assert lost == ["RailLost"], f"failover history of {cut_rail}: {job['status'].get('failoverHistory')}"
        pods = [p for p in kube.get("pods", namespace=JOB_NAMESPACE)["items"] if owned_by(p, job["metadata"]["uid"])]
        assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    finally:
        subprocess.run(["ip", "link", "set", cut_link, "up"], check=True)

    def rail_up_again():
        found = railnode_rails(kube, node_name(kube))
        return found.get(cut_rail, {}).get("operState") == "up" and found
    wait_for(f"the RailNode to show {cut_rail} up again", rail_up_again)

    job = wait_for(f"{LONG_JOB} healthy again after the rail came back",
                   lambda: job_when(kube, LONG_JOB, JOB_NAMESPACE, "Running", RailsHealthy="True", Degraded="False"))
    history = [f["action"] for f in job["status"]["failoverHistory"] if f.get("rail") == cut_rail]
    assert history == ["RailLost", "RailRecovered"], job["status"]["failoverHistory"]


def test_allreduce_survives_a_rail_cut_mid_run(kube, rails):
    """The product's promise: training stays alive when a rail dies under a running collective
    (runtime failover replays the lost slices on the surviving rail)."""
    kube.apply(MANIFESTS / "job-chaos.yaml")
    cut_link = rail_links(kube)[1]
    try:
        def rank0_started():
            proc = kube.kubectl("logs", "-n", JOB_NAMESPACE, f"{CHAOS_JOB}-0", "-c", "bench", check=False)
            return proc.returncode == 0 and "nezha-bench allreduce" in proc.stdout
        wait_for(f"{CHAOS_JOB} rank 0 to start measuring", rank0_started, interval=0.5)
        subprocess.run(["ip", "link", "set", cut_link, "down"], check=True)

        def finished():
            job = kube.get("multirailjob", CHAOS_JOB, JOB_NAMESPACE)
            return job.get("status", {}).get("phase") in ("Succeeded", "Failed") and job
        job = wait_for(f"{CHAOS_JOB} to finish with a rail cut", finished, timeout=600)
        # The cut happened while the workers ran: the job saw it.
        assert condition(job, "Degraded").get("status") == "True", job["status"]
        logs = kube.kubectl("logs", "-n", JOB_NAMESPACE, f"{CHAOS_JOB}-0", "-c", "bench").stdout
        assert job["status"]["phase"] == "Succeeded", f"{condition(job, 'Failed')}\nrank 0 log:\n{logs}"
        rows = parse_bench_table(logs)
        assert [r["check"] for r in rows] == ["ok"], logs
        # The runtime re-planned without the cut rail: the last (checked) operation ran entirely on
        # the survivor, which also proves the cut landed mid-run.
        assert rows[0]["rail_bytes"] == {RAIL_CLASSES[0]: rows[0]["bytes"], RAIL_CLASSES[1]: 0}, logs
    finally:
        subprocess.run(["ip", "link", "set", cut_link, "up"], check=True)
        kube.kubectl("delete", "multirailjob", CHAOS_JOB, "-n", JOB_NAMESPACE, "--wait=true", check=False)


def outage_workers_pending(kube):
    """Both workers of the outage job exist and are Pending (kept off the only node)."""
    job = kube.get("multirailjob", OUTAGE_JOB, JOB_NAMESPACE)
    pods = [p for p in kube.get("pods", namespace=JOB_NAMESPACE)["items"] if owned_by(p, job["metadata"]["uid"])]
    return len(pods) == 2 and all(p["status"].get("phase") == "Pending" for p in pods) and pods


def test_workers_created_during_a_rail_outage_run_after_recovery(kube, rails):
    cut_link, cut_rail = rail_links(kube)[1], RAIL_CLASSES[1]
    subprocess.run(["ip", "link", "set", cut_link, "down"], check=True)
    try:
        wait_for(f"the RailNode to show {cut_rail} down",
                 lambda: railnode_rails(kube, node_name(kube)).get(cut_rail, {}).get("operState") == "down")
        kube.apply(MANIFESTS / "job-outage.yaml")
        # The only node has a broken rail: the operator keeps the new workers off it.
        wait_for(f"{OUTAGE_JOB} workers created and kept off {node_name(kube)}", lambda: outage_workers_pending(kube))
    finally:
        subprocess.run(["ip", "link", "set", cut_link, "up"], check=True)
    try:
        def running():
            job = kube.get("multirailjob", OUTAGE_JOB, JOB_NAMESPACE)
            return job.get("status", {}).get("phase") == "Running" and job
        wait_for(f"{OUTAGE_JOB} Running once {cut_rail} is back", running, timeout=OUTAGE_RECOVERY_SECONDS)
    finally:
        kube.kubectl("delete", "multirailjob", OUTAGE_JOB, "-n", JOB_NAMESPACE, "--wait=true")


def runtime_rail_states(kube, pod):
    """The runtime's own /status in a worker, read through the API server's pod proxy (the
    operator reaches it directly; the test goes where kubectl can)."""
    proc = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods/{pod}:9402/proxy/status", check=False)
    if proc.returncode != 0:
        return None
    return {r["name"]: r["state"] for r in json.loads(proc.stdout)["rails"]}


def events_of(kube, job, reason):
    items = kube.get("events", namespace=JOB_NAMESPACE)["items"]
    return [e["message"] for e in items
            if e["involvedObject"].get("name") == job and e["involvedObject"].get("kind") == "MultiRailJob"
            and e["reason"] == reason]


def set_quarantine(kube, rails):
    kube.kubectl("patch", "railnode", node_name(kube), "--type", "merge",
                 "-p", json.dumps({"spec": {"quarantinedRails": rails}}))


def test_operator_drains_a_quarantined_rail_through_the_runtime_and_restores_it(kube, rails):
    """A failure the pods cannot see (here an admin's quarantine on the RailNode; in a fabric a
    switch port): the operator drains the rail in the running job through the runtime's
    authenticated control endpoint, the runtime applies it on both ranks, and lifting the
    quarantine restores it."""
    kube.apply(MANIFESTS / "job-steer.yaml")
    pods = [f"{STEER_JOB}-0", f"{STEER_JOB}-1"]
    drained_rail = RAIL_CLASSES[1]
    try:
        def both_runtimes_use_both_rails():
            states = [runtime_rail_states(kube, p) for p in pods]
            ok = all(s and all(s.get(r) == "healthy" for r in RAIL_CLASSES) for s in states)
            return ok and states
        wait_for(f"{STEER_JOB}'s runtimes up on both rails", both_runtimes_use_both_rails)

        set_quarantine(kube, [drained_rail])

        def drained_everywhere():
            states = [runtime_rail_states(kube, p) for p in pods]
            ok = all(s and s.get(drained_rail) == "drained" and s.get(RAIL_CLASSES[0]) == "healthy" for s in states)
            return ok and states
        wait_for(f"{drained_rail} drained in both runtimes", drained_everywhere)
        drains = events_of(kube, STEER_JOB, "RailDrained")
        assert drains and f'rail "{drained_rail}" quarantined on node "{node_name(kube)}"' in drains[0], drains
        job = kube.get("multirailjob", STEER_JOB, JOB_NAMESPACE)
        assert [d["rail"] for d in job["status"].get("drainedRails", [])] == [drained_rail], job["status"]
        assert condition(job, "Degraded").get("status") == "True", job["status"]
    finally:
        set_quarantine(kube, [])

    def restored_everywhere():
        states = [runtime_rail_states(kube, p) for p in pods]
        return all(s and s.get(drained_rail) == "healthy" for s in states) and states
    wait_for(f"{drained_rail} back in both runtimes", restored_everywhere)
    assert events_of(kube, STEER_JOB, "RailRestored"), "no RailRestored event"
    assert len(events_of(kube, STEER_JOB, "RailDrained")) == 1, "drained more than once"
    job = kube.get("multirailjob", STEER_JOB, JOB_NAMESPACE)
    assert not job["status"].get("drainedRails"), job["status"]
    assert job["status"]["phase"] == "Running", job["status"]
    kube.kubectl("delete", "multirailjob", STEER_JOB, "-n", JOB_NAMESPACE, "--wait=true")


def plugin_endpoint(kube, pod, path, process=0):
    """GET path of the NCCL plugin's control endpoint in process `process` of a worker (port
    9434 + its local rank, through the API server's pod proxy), or None while it does not answer."""
    proc = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods/{pod}:{9434 + process}/proxy{path}",
                        check=False)
    return proc.stdout if proc.returncode == 0 else None


def plugin_rails(kube, pod, process=0):
    """The plugin's /status rails by name (bytes_sent, drained, ...), or None."""
    body = plugin_endpoint(kube, pod, "/status", process)
    return {r["name"]: r for r in json.loads(body)["rails"]} if body else None


def metric(text, name, **labels):
    """The value of the sample of family name whose labels include labels (0 if none)."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in (text or "").splitlines():
        if line.startswith(name + "{") and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_operator_drains_an_nccl_jobs_rail_through_the_plugin_and_restores_it(kube, rails, tmp_path_factory):
    """The same failure for an NCCL job: its processes are nezha-nccl-harness driving
    libnccl-net-nezha.so as NCCL's proxy does, two per pod as a GPU pod runs one per GPU. The
    operator drains the rail through every process's plugin endpoint (port 9434 + local rank,
    signed with the job's token; the plugin applies it to its own process, so all four
    processes on the node are asked), every plugin stops using it and counts the drain, lifting
    the quarantine restores it in all four, and the allreduce loop ends with every element
    exact."""
    handles = tmp_path_factory.mktemp("nccl-handles")  # root-owned, on the node (one-node cluster)
    manifest = handles.parent / "job-nccl-steer.yaml"
    manifest.write_text((MANIFESTS / "job-nccl-steer.yaml").read_text().replace("HANDLES_DIR", str(handles)))
    kube.apply(manifest)
    pods = [f"{NCCL_STEER_JOB}-0", f"{NCCL_STEER_JOB}-1"]
    processes = [(pod, k) for pod in pods for k in (0, 1)]  # (pod, local rank)
    drained_rail, kept_rail = RAIL_CLASSES[1], RAIL_CLASSES[0]

    def loop_runs():
        # pytest.fail, not assert: wait_for retries on AssertionError.
        status = kube.get("multirailjob", NCCL_STEER_JOB, JOB_NAMESPACE).get("status", {})  # none yet right after apply
        if status.get("phase") in ("Succeeded", "Failed"):
            pytest.fail(f"the harness loop ended before the test was done (raise --seconds in job-nccl-steer.yaml): {status}")

    def bytes_on(rail):
        states = [plugin_rails(kube, p, k) for p, k in processes]
        return None if None in states else [s[rail]["bytes_sent"] for s in states]

    def moving(rail, moves):
        """A probe: true once rail's bytes_sent, in every process, moved (moves) or stood still
        (not moves) between two reads while the kept rail moved in every one."""
        last = {}

        def probe():
            loop_runs()
            now, kept = bytes_on(rail), bytes_on(kept_rail)
            before = last.get("v")
            last["v"] = (now, kept)
            if before is None or None in (now, kept, *before):
                return False
            kept_moved = all(b < a for b, a in zip(before[1], kept))
            changed = [b != a for b, a in zip(before[0], now)]
            return kept_moved and (all(changed) if moves else not any(changed)) and (before, now)
        return probe

    try:
        wait_for("all four plugins carrying data on both rails", moving(drained_rail, True))
        for pod, k in processes:
            status = json.loads(plugin_endpoint(kube, pod, "/status", k))
            assert (status["local_rank"], status["local_world_size"]) == (k, 2), status
        set_quarantine(kube, [drained_rail])

        def drained_in_all():
            loop_runs()
            states = [plugin_rails(kube, p, k) for p, k in processes]
            ok = all(s and s[drained_rail]["drained"] and not s[kept_rail]["drained"] for s in states)
            return ok and states
        wait_for(f"{drained_rail} drained in all four plugins", drained_in_all)
        wait_for(f"{drained_rail} carrying nothing while drained", moving(drained_rail, False))
        for pod, k in processes:
            text = plugin_endpoint(kube, pod, "/metrics", k)
            assert metric(text, "nezha_nccl_rail_drained", rail=drained_rail, local_rank=k) == 1, text
            assert metric(text, "nezha_runtime_drains_total", rail=drained_rail, reason="operator") >= 1, text
        drains = events_of(kube, NCCL_STEER_JOB, "RailDrained")
        assert drains and "NCCL plugin" in drains[0] and f'rail "{drained_rail}" quarantined' in drains[0], drains
        job = kube.get("multirailjob", NCCL_STEER_JOB, JOB_NAMESPACE)
        assert [d["rail"] for d in job["status"].get("drainedRails", [])] == [drained_rail], job["status"]
    finally:
        set_quarantine(kube, [])

    def restored_in_all():
        loop_runs()
        states = [plugin_rails(kube, p, k) for p, k in processes]
        return all(s and not s[drained_rail]["drained"] for s in states) and states
    wait_for(f"{drained_rail} restored in all four plugins", restored_in_all)
    wait_for(f"{drained_rail} carrying data again", moving(drained_rail, True))
    assert events_of(kube, NCCL_STEER_JOB, "RailRestored"), "no RailRestored event"
    assert len(events_of(kube, NCCL_STEER_JOB, "RailDrained")) == 1, "drained more than once"
    assert not kube.get("multirailjob", NCCL_STEER_JOB, JOB_NAMESPACE)["status"].get("drainedRails")

    def finished():
        job = kube.get("multirailjob", NCCL_STEER_JOB, JOB_NAMESPACE)
        return job.get("status", {}).get("phase") in ("Succeeded", "Failed") and job
    job = wait_for(f"{NCCL_STEER_JOB}'s loop to end", finished)
    for pod in pods:
        log = kube.kubectl("logs", "-n", JOB_NAMESPACE, pod, "-c", "harness").stdout
        results = [json.loads(line) for line in log.splitlines() if line.startswith('{"rank"')]
        assert len(results) == 2, f"{pod} printed {len(results)} results, want one per process:\n{log[-4000:]}"
        for out in results:
            assert out["check"] == "ok" and out["ops"] > 0, out
            assert all(r["bytes_sent"] > 0 for r in out["stats"]["rails"]), out["stats"]
    assert job["status"]["phase"] == "Succeeded", job["status"]
    kube.kubectl("delete", "multirailjob", NCCL_STEER_JOB, "-n", JOB_NAMESPACE, "--wait=true")


def container_pid(kube, pod, container):
    """The host PID of a running (init) container, from containerd (the test stands in for the
    fabric, so it reaches into the pod's network namespace from the host)."""
    status = kube.get("pod", pod, JOB_NAMESPACE)["status"]
    for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        if cs["name"] == container and cs.get("state", {}).get("running") and cs.get("containerID"):
            cid = cs["containerID"].split("://", 1)[1]
            tasks = subprocess.run(["ctr", "--address", kube.env["NEZHA_CONTAINERD_ADDRESS"], "-n", "k8s.io", "task", "ls"],
                                   check=True, capture_output=True, text=True).stdout
            for line in tasks.splitlines():
                fields = line.split()
                if fields and fields[0] == cid:
                    return int(fields[1])
    return None


def black_hole(pid, iface, on):
    """Drop everything on the pod's interface, link left up (iptables in the pod's netns)."""
    op = "-A" if on else "-D"
    for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
        subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", op, chain, flag, iface, "-j", "DROP"], check=True)


def runtime_preflight(kube, pod):
    proc = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods/{pod}:9402/proxy/status", check=False)
    return json.loads(proc.stdout).get("preflight") if proc.returncode == 0 else None


def test_preflight_failure_shows_in_rails_verified_and_the_job_starts_without_the_rail(kube, rails):
    """A rail that is up but carries nothing before the job starts: the runtimes' start-up check
    finds it, RailsVerified names the failing rank/rail/peer pairs, the job trains on the other
    rail (StartWithoutRail), and once the fault is gone the rail passes re-admission."""
    kube.apply(MANIFESTS / "job-preflight.yaml")
    pods = [f"{PREFLIGHT_JOB}-0", f"{PREFLIGHT_JOB}-1"]
    holed = RAIL_CLASSES[1]
    pid = None
    try:
        def gates_running():
            found = [container_pid(kube, pod, "gate") for pod in pods]
            return None not in found and found
        pid = wait_for(f"{PREFLIGHT_JOB}'s gates running", gates_running)[1]
        black_hole(pid, "nz1", True)
        for pod in pods:
            kube.kubectl("exec", "-n", JOB_NAMESPACE, pod, "-c", "gate", "--", "sh", "-c", ": > /gate/open")

        def verified_false():
            job = kube.get("multirailjob", PREFLIGHT_JOB, JOB_NAMESPACE)
            c = condition(job, "RailsVerified")
            return c.get("reason") == "PreflightFailed" and c.get("status") == "False" and job
        job = wait_for(f"{PREFLIGHT_JOB} RailsVerified=False/PreflightFailed", verified_false)
        message = condition(job, "RailsVerified")["message"]
        assert f"pre-flight: started without rail(s) {holed}:" in message, message
        assert f"rank 0 rail {holed} -> rank 1 (connect:" in message, message
        assert f"rank 1 rail {holed} -> rank 0 (connect:" in message, message
        # Training runs on the other rail meanwhile.
        def rank0_on_rail0():
            states = runtime_rail_states(kube, pods[0])
            return states and states.get(RAIL_CLASSES[0]) == "healthy" and states
        states = wait_for("rank 0's runtime up on rail0", rank0_on_rail0)
        assert states.get(holed) in ("failed", "probing"), states
        assert job["status"]["phase"] in ("Running", "Degraded"), job["status"]
    finally:
        if pid is not None:
            # The gate has exited by now; the bench container shares the pod's network namespace.
            black_hole(container_pid(kube, pods[1], "bench"), "nz1", False)

    def recovered():
        job = kube.get("multirailjob", PREFLIGHT_JOB, JOB_NAMESPACE)
        c = condition(job, "RailsVerified")
        return c.get("reason") == "PreflightRecovered" and c.get("status") == "True" and job
    wait_for(f"{PREFLIGHT_JOB} RailsVerified=True/PreflightRecovered after the fault is gone", recovered)
    assert runtime_preflight(kube, pods[1])["result"] == "recovered"
    assert all(runtime_rail_states(kube, p).get(holed) == "healthy" for p in pods)
    kube.kubectl("delete", "multirailjob", PREFLIGHT_JOB, "-n", JOB_NAMESPACE, "--wait=true")


def test_deleting_a_job_removes_its_children(kube, rails):
    job = kube.get("multirailjob", LONG_JOB, JOB_NAMESPACE)
    uid = job["metadata"]["uid"]
    kinds = ["pods", "services", "secrets", "network-attachment-definitions"]

    def children():
        return {k: [o["metadata"]["name"] for o in kube.get(k, namespace=JOB_NAMESPACE)["items"] if owned_by(o, uid)]
                for k in kinds}
    before = children()
    assert before["pods"] and before["network-attachment-definitions"], before
    kube.kubectl("delete", "multirailjob", LONG_JOB, "-n", JOB_NAMESPACE, "--wait=true")
    wait_for(f"the children of {LONG_JOB} to be garbage-collected",
             lambda: not any(children().values()) or None)


def test_flapping_rail_is_quarantined_and_the_next_job_avoids_the_node(kube, rails, release):
    """Quarantine by evidence, turned on as an admin would (helm upgrade): the node's rail fails
    twice, the operator quarantines it on the RailNode (kubectl shows it), a new job's workers are
    kept off the node, and an admin's release lets them run."""
    kube.helm("upgrade", RELEASE, REPO / "charts" / "nezha", "-n", RELEASE_NAMESPACE, "--reuse-values",
              "--set", "operator.quarantine.failures=2", "--wait")
    kube.kubectl("rollout", "status", "-n", RELEASE_NAMESPACE, f"deployment/{OPERATOR}", "--timeout=120s")
    flap_link, flap_rail = rail_links(kube)[1], RAIL_CLASSES[1]
    def failures_recorded():
        rn = kube.get("railnode", node_name(kube))
        evidence = json.loads(rn["metadata"].get("annotations", {}).get("nezha.io/rail-evidence", "{}"))
        return len(evidence.get(flap_rail, {}).get("failures", []))
    try:
        for failure in (1, 2):
            subprocess.run(["ip", "link", "set", flap_link, "down"], check=True)
            # The operator (restarted by the upgrade) records each failure it sees on the RailNode.
            wait_for(f"failure {failure} of {flap_rail} in the RailNode's evidence", lambda n=failure: failures_recorded() == n)
            subprocess.run(["ip", "link", "set", flap_link, "up"], check=True)
            wait_for(f"the RailNode to show {flap_rail} up",
                     lambda: railnode_rails(kube, node_name(kube)).get(flap_rail, {}).get("operState") == "up")
    finally:
        subprocess.run(["ip", "link", "set", flap_link, "up"], check=True)

    def quarantined():
        rn = kube.get("railnode", node_name(kube))
        return rn["spec"].get("quarantinedRails") == [flap_rail] and rn
    wait_for(f"{flap_rail} quarantined on {node_name(kube)}", quarantined)
    listing = kube.kubectl("get", "railnode", node_name(kube)).stdout
    assert flap_rail in listing, listing
    try:
        kube.apply(MANIFESTS / "job-outage.yaml")
        wait_for(f"{OUTAGE_JOB} workers kept off the quarantined node", lambda: outage_workers_pending(kube))
        set_quarantine(kube, [])  # the admin's release

        def running():
            job = kube.get("multirailjob", OUTAGE_JOB, JOB_NAMESPACE)
            return job.get("status", {}).get("phase") == "Running" and job
        wait_for(f"{OUTAGE_JOB} Running after the release", running, timeout=OUTAGE_RECOVERY_SECONDS)
    finally:
        set_quarantine(kube, [])
        kube.kubectl("delete", "multirailjob", OUTAGE_JOB, "-n", JOB_NAMESPACE, "--wait=true", check=False)


def test_helm_uninstall_removes_operator_and_agent(kube, release):
    kube.kubectl("delete", "multirailjobs", "-n", JOB_NAMESPACE, "-l", "nezha-e2e=product", "--wait=true")
    kube.kubectl("delete", "railclasses", *RAIL_CLASSES, "--wait=true")
    kube.helm("uninstall", "nezha", "-n", RELEASE_NAMESPACE, "--wait")
    release["installed"] = False
    assert not kube.exists("deployment", OPERATOR, RELEASE_NAMESPACE)
    assert not kube.exists("daemonset", AGENT, AGENT_NAMESPACE)

    def no_pods():
        items = [p for ns in (RELEASE_NAMESPACE, AGENT_NAMESPACE)
                 for p in kube.get("pods", namespace=ns)["items"]]
        return not items or None
    wait_for("the operator and agent pods to be gone", no_pods)
