"""Kubeflow on the local cluster with the real controllers, built from the Go module proxy by
hack/kubeflow.sh and installed from their own manifests (pods, their own webhooks and certificate
rotation; versions in hack/versions.sh):

- Trainer v2: a TrainJob on the chart's ClusterTrainingRuntime (`trainer.enabled=true`). Trainer
  makes the JobSet, the JobSet controller the Job, the Job controller the two `node` pods, and
  Nezha's pod webhook gives them both rails, the NEZHA_* environment and the runtime (init
  container). A rail is cut on the host while they allreduce; the job completes, unrestarted,
  with the result checked.
- Legacy: a MultiRailJob in pytorchJob mode; the real training-operator v1 runs its PyTorchJob
  (Master + Worker, its own wait-for-master init container) on both rails; a rail is cut on the
  host while they allreduce, and the job completes unrestarted, as the TrainJob.

The training program is nezha-bench from the runtime image (no torch in it): `--check` verifies
every allreduce result. With numProcPerNode 1, rank and world size are Trainer's PET_NODE_RANK
and PET_NNODES, as torchrun would pass them; the training-operator sets RANK and WORLD_SIZE."""

import json
import subprocess

import pytest

from product_helpers import (
    JOB_NAMESPACE,
    MANIFESTS,
    RAIL_CLASSES,
    RAIL_SUBNET_PREFIXES,
    RELEASE_NAMESPACE,
    REPO,
    condition,
    owned_by,
    parse_bench_table,
    run,
    wait_for,
)

KUBEFLOW_SH = REPO / "hack" / "kubeflow.sh"
OPERATOR = "nezha-operator"
RUNTIME_IMAGE = "nezha/runtime:0.1.0"
TRAINJOB = "nze-tj"
PTJ_JOB = "nze-ptj"
# Controllers (namespace, Deployment) of each rendered manifest.
DEPLOYMENTS = {
    "jobset": ("jobset-system", "jobset-controller-manager"),
    "trainer": ("kubeflow-system", "kubeflow-trainer-controller-manager"),
    "training-operator": ("kubeflow", "training-operator"),
}
# The webhook configurations each controller's certificate rotation fills in.
WEBHOOKS = {
    "jobset": ["mutatingwebhookconfiguration/jobset-mutating-webhook-configuration",
               "validatingwebhookconfiguration/jobset-validating-webhook-configuration"],
    "trainer": ["mutatingwebhookconfiguration/defaulter.trainer.kubeflow.org",
                "validatingwebhookconfiguration/validator.trainer.kubeflow.org"],
    "training-operator": ["validatingwebhookconfiguration/validator.training-operator.kubeflow.org"],
}
# Controllers get longer than the default wait: their certificate rotation writes a Secret that
# the kubelet then syncs into the pod before the webhook server (and readiness) comes up.
CONTROLLER_WAIT_SECONDS = 300
# Training: 16 MiB allreduces, long enough to cut a rail under them (as job-chaos.yaml).
BENCH_LONG = ["/opt/nezha/bin/nezha-bench", "--op", "allreduce", "--check", "--min-bytes", "16M",
              "--max-bytes", "16M", "--warmup", "2", "--iters", "1000"]


def apply_obj(kube, obj):
    return kube.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(obj))


def manifest_paths():
    return dict(zip(["trainer", "jobset", "training-operator"], run([KUBEFLOW_SH, "manifests"]).stdout.split()))


@pytest.fixture(scope="module")
def kubeflow_built(kube, images):
    """hack/kubeflow.sh build (cached: binaries, images, manifests), images imported."""
    run([KUBEFLOW_SH, "build"], timeout=3600)
    for tarball in run([KUBEFLOW_SH, "images"]).stdout.split():
        run([REPO / "hack" / "local-cluster.sh", "load-image", tarball])
    return manifest_paths()


def install(kube, paths, name):
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", paths[name])


def wait_installed(kube, name):
    namespace, deployment = DEPLOYMENTS[name]

    def available():
        d = kube.get("deployment", deployment, namespace, check=False)
        return d and condition(d, "Available").get("status") == "True" and d
    wait_for(f"the {name} controller Available", available, timeout=CONTROLLER_WAIT_SECONDS)

    def ca_injected():
        for ref in WEBHOOKS[name]:
            wh = json.loads(kube.kubectl("get", ref, "-o", "json").stdout)
            if not all(w.get("clientConfig", {}).get("caBundle") for w in wh["webhooks"]):
                return False
        return True
    wait_for(f"the {name} webhooks' CA injected", ca_injected, timeout=CONTROLLER_WAIT_SECONDS)


def uninstall(kube, paths, name):
    kube.kubectl("delete", "-f", paths[name], "--ignore-not-found", "--wait=true", check=False)


def restart_operator(kube):
    """The operator turns on its PyTorchJob support only if the CRD exists when it starts."""
    kube.kubectl("rollout", "restart", "-n", RELEASE_NAMESPACE, f"deployment/{OPERATOR}")
    kube.kubectl("rollout", "status", "-n", RELEASE_NAMESPACE, f"deployment/{OPERATOR}", "--timeout=180s")


@pytest.fixture(scope="module")
def rails(kube, release):
    def available():
        d = kube.get("deployment", OPERATOR, RELEASE_NAMESPACE, check=False)
        return d and condition(d, "Available").get("status") == "True"
    wait_for("the operator Deployment Available", available)
    for i in range(len(RAIL_CLASSES)):
        kube.apply(MANIFESTS / f"railclass-rail{i}.yaml")
    return RAIL_CLASSES

# JobSet v0.12.0 (what Trainer v2.3.0 requires) ships a CRD whose CEL rules read
# metadata.namespace, which API servers before 1.30 reject ("undefined field 'namespace'").
TRAINER_MIN_MINOR = 30
TRAINER_NEEDS = "v2.3.0 needs JobSet v0.12.0, whose CRD's CEL rules need Kubernetes 1.30+"


@pytest.fixture(scope="module")
def trainer(kube, rails, kubeflow_built):
    """JobSet and Trainer installed; the chart's ClusterTrainingRuntime for the e2e rails."""
    paths = kubeflow_built
    server = json.loads(kube.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    if int(server.split(".")[1]) < TRAINER_MIN_MINOR:
        # Said, not hidden: `make e2e-oldest` prints the reason with the skip.
        pytest.skip(f"Trainer {TRAINER_NEEDS}; this cluster runs {server}")
    runtime = ""
    try:
        install(kube, paths, "jobset")
        install(kube, paths, "trainer")
        wait_installed(kube, "jobset")
        wait_installed(kube, "trainer")
        runtime = kube.helm("template", "nezha", REPO / "charts" / "nezha", "-n", RELEASE_NAMESPACE, "--kube-version", server,
                            "--show-only", "templates/trainer-runtime.yaml", "--set", "trainer.enabled=true",
                            "--set", "trainer.railClasses={" + ",".join(rails) + "}").stdout
        kube.kubectl("apply", "--server-side", "-f", "-", input_text=runtime)
        got = json.loads(kube.kubectl("get", "-f", "-", "-o", "json", input_text=runtime).stdout)
        yield got["items"][0] if got["kind"] == "List" else got
    finally:
        kube.kubectl("delete", "trainjobs", "-n", JOB_NAMESPACE, "-l", "nezha-e2e=kubeflow",
                     "--ignore-not-found", "--wait=true", check=False)
        if runtime:
            kube.kubectl("delete", "-f", "-", "--ignore-not-found", check=False, input_text=runtime)
        uninstall(kube, paths, "trainer")
        uninstall(kube, paths, "jobset")


@pytest.fixture(scope="module")
def training_operator(kube, rails, kubeflow_built):
    paths = kubeflow_built
    try:
        install(kube, paths, "training-operator")
        wait_installed(kube, "training-operator")
        restart_operator(kube)
        yield
    finally:
        kube.kubectl("delete", "multirailjobs", "-n", JOB_NAMESPACE, "-l", "nezha-e2e=kubeflow",
                     "--ignore-not-found", "--wait=true", check=False)
        uninstall(kube, paths, "training-operator")
        restart_operator(kube)


def pod_logs(kube, pod, container):
    proc = kube.kubectl("logs", "-n", JOB_NAMESPACE, pod, "-c", container, check=False)
    return proc.stdout if proc.returncode == 0 else ""


def assert_on_both_rails(pod):
    status = {s.get("interface"): s for s in json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])}
    for i, prefix in enumerate(RAIL_SUBNET_PREFIXES):
        assert status[f"nz{i}"]["ips"][0].startswith(prefix), (pod["metadata"]["name"], status)


def env_of(pod, container):
    c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def trainjob(runtime_name):
    shell = "RANK=$PET_NODE_RANK WORLD_SIZE=$PET_NNODES exec " + " ".join(BENCH_LONG)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": TRAINJOB, "namespace": JOB_NAMESPACE, "labels": {"nezha-e2e": "kubeflow"}},
        "spec": {
            "runtimeRef": {"name": runtime_name},
            "trainer": {
                "image": RUNTIME_IMAGE, "numNodes": 2, "numProcPerNode": 1,
                "command": ["/bin/sh", "-c", shell],
                # Give up on a dead rail after 3 s without progress (as job-chaos.yaml).
                "env": [{"name": "NEZHA_IO_TIMEOUT_MS", "value": "3000"}],
            },
        },
    }


def trainjob_pods(kube):
    items = kube.kubectl("get", "pods", "-n", JOB_NAMESPACE, "-l", f"jobset.sigs.k8s.io/jobset-name={TRAINJOB}",
                         "-o", "json").stdout
    return sorted(json.loads(items)["items"],
                  key=lambda p: p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index", ""))


def test_trainjob_on_the_nezha_runtime_survives_a_rail_cut(kube, kube_env_links, trainer):
    runtime = trainer
    apply_obj(kube, trainjob(runtime["metadata"]["name"]))
    cut_link = kube_env_links[1]
    try:
        def rank0_started():
            pods = trainjob_pods(kube)
            return (len(pods) == 2 and "nezha-bench allreduce" in pod_logs(kube, pods[0]["metadata"]["name"], "node")
                    and pods)
        pods = wait_for(f"{TRAINJOB} rank 0 to start measuring", rank0_started, timeout=CONTROLLER_WAIT_SECONDS,
                        interval=0.5)
        subprocess.run(["ip", "link", "set", cut_link, "down"], check=True)

        def finished():
            tj = kube.get("trainjob", TRAINJOB, JOB_NAMESPACE)
            done = any(condition(tj, t).get("status") == "True" for t in ("Complete", "Failed"))
            return done and tj
        tj = wait_for(f"{TRAINJOB} to finish with a rail cut", finished, timeout=600)
    finally:
        subprocess.run(["ip", "link", "set", cut_link, "up"], check=True)

    pods = trainjob_pods(kube)
    rank0 = pods[0]["metadata"]["name"]
    logs = pod_logs(kube, rank0, "node")
    assert condition(tj, "Complete").get("status") == "True", f"{tj.get('status')}\nrank 0 log:\n{logs}"
    rows = parse_bench_table(logs)
    assert [r["check"] for r in rows] == ["ok"], logs
    # The last (checked) allreduce ran entirely on the surviving rail: the cut landed mid-run and
    # the runtime failed over instead of the job restarting.
    assert rows[0]["rail_bytes"] == {RAIL_CLASSES[0]: rows[0]["bytes"], RAIL_CLASSES[1]: 0}, logs

    # Who made what: Trainer the JobSet, the JobSet controller the Job, the Job controller the pods.
    js = kube.get("jobset", TRAINJOB, JOB_NAMESPACE)
    assert owned_by(js, tj["metadata"]["uid"]), js["metadata"]
    assert js.get("status", {}).get("restarts", 0) == 0, js["status"]
    jobs = [j for j in kube.get("jobs", namespace=JOB_NAMESPACE)["items"] if owned_by(j, js["metadata"]["uid"])]
    assert [j["metadata"]["name"] for j in jobs] == [f"{TRAINJOB}-node-0"], jobs
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for rank, pod in enumerate(pods):
        name = pod["metadata"]["name"]
        assert owned_by(pod, jobs[0]["metadata"]["uid"]), pod["metadata"]
        assert pod["status"]["phase"] == "Succeeded", (name, pod["status"])
        assert all(s.get("restartCount", 0) == 0 for s in pod["status"].get("containerStatuses", [])), pod["status"]
        # Nezha's webhook: both rails, the runtime (init container), the environment on Trainer's
        # PET_MASTER_ADDR and the token of the group.
        assert_on_both_rails(pod)
        assert [c["name"] for c in pod["spec"].get("initContainers", [])] == ["nezha-runtime-install"], name
        env = env_of(pod, "node")
        assert env["PET_MASTER_ADDR"] == f"{TRAINJOB}-node-0-0.{TRAINJOB}", env
        assert env["NEZHA_RENDEZVOUS"] == f"{TRAINJOB}-node-0-0.{TRAINJOB}:29400", env
        assert env["NEZHA_RAILS"].startswith(f"{RAIL_CLASSES[0]}=nz0:"), env
        # The group's token is a read-only Secret volume named by NEZHA_JOB_TOKEN_FILE, never an
        # environment variable (docs/security.md "Job token").
        assert env["NEZHA_JOB_TOKEN_FILE"] == "/var/run/nezha/job-token/token" and "NEZHA_JOB_TOKEN" not in env, env
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["nezha-job-token"]["secret"]["secretName"] == f"{TRAINJOB}-token", volumes
        assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == str(rank)


def ptj_multirailjob():
    container = {"name": "pytorch", "image": RUNTIME_IMAGE, "imagePullPolicy": "IfNotPresent", "command": BENCH_LONG,
                 # Give up on a dead rail after 3 s without progress (as the TrainJob).
                 "env": [{"name": "NEZHA_IO_TIMEOUT_MS", "value": "3000"}]}
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "nezha.io/v1alpha1", "kind": "MultiRailJob",
        "metadata": {"name": PTJ_JOB, "namespace": JOB_NAMESPACE, "labels": {"nezha-e2e": "kubeflow"}},
        "spec": {
            "rails": RAIL_CLASSES,
            "pytorchJob": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
            "failurePolicy": {"minHealthyRails": 1, "onRailLoss": "ContinueDegraded"},
        },
    }


def test_legacy_pytorchjob_on_the_training_operator_survives_a_rail_cut(kube, kube_env_links, training_operator):
    apply_obj(kube, ptj_multirailjob())
    master = f"{PTJ_JOB}-master-0"
    cut_link = kube_env_links[1]
    try:
        try:
            wait_for(f"{master} to start measuring", lambda: "nezha-bench allreduce" in pod_logs(kube, master, "pytorch"),
                     timeout=CONTROLLER_WAIT_SECONDS, interval=0.5)
            subprocess.run(["ip", "link", "set", cut_link, "down"], check=True)

            def finished():
                job = kube.get("multirailjob", PTJ_JOB, JOB_NAMESPACE)
                return job.get("status", {}).get("phase") in ("Succeeded", "Failed") and job
            job = wait_for(f"{PTJ_JOB} (PyTorchJob) to finish with a rail cut", finished, timeout=600)
        finally:
            subprocess.run(["ip", "link", "set", cut_link, "up"], check=True)
        logs = pod_logs(kube, master, "pytorch")
        assert job["status"]["phase"] == "Succeeded", f"{job['status']}\nmaster log:\n{logs}"
        ptj = kube.get("pytorchjob", PTJ_JOB, JOB_NAMESPACE)
        assert owned_by(ptj, job["metadata"]["uid"]), ptj["metadata"]
        assert condition(ptj, "Succeeded").get("status") == "True", ptj.get("status")
        rows = parse_bench_table(logs)
        assert [r["check"] for r in rows] == ["ok"], logs
        # The last (checked) allreduce ran entirely on the surviving rail: the runtime failed over
        # mid-run instead of the training operator restarting the job.
        assert rows[0]["rail_bytes"] == {RAIL_CLASSES[0]: rows[0]["bytes"], RAIL_CLASSES[1]: 0}, logs

        pods = {p["metadata"]["name"]: p for p in kube.get("pods", namespace=JOB_NAMESPACE)["items"]
                if owned_by(p, ptj["metadata"]["uid"])}
        assert sorted(pods) == [master, f"{PTJ_JOB}-worker-0"], sorted(pods)
        for name, pod in pods.items():
            assert_on_both_rails(pod)
            assert all(s.get("restartCount", 0) == 0 for s in pod["status"].get("containerStatuses", [])), pod["status"]
            env = env_of(pod, "pytorch")
            # The training operator's environment next to Nezha's.
            assert env["MASTER_ADDR"] == master and env["WORLD_SIZE"] == "2", env
            assert env["NEZHA_RENDEZVOUS"].startswith(f"{master}.{JOB_NAMESPACE}.svc:"), env
        # The training operator's own init container: the worker waits for the master's name.
        assert [c["name"] for c in pods[f"{PTJ_JOB}-worker-0"]["spec"]["initContainers"]] == ["init-pytorch"]
    finally:
        kube.kubectl("delete", "multirailjob", PTJ_JOB, "-n", JOB_NAMESPACE, "--ignore-not-found", "--wait=true",
                     check=False)


@pytest.fixture(scope="module")
def kube_env_links(kube):
    return kube.env["NEZHA_CLUSTER_RAIL_IFACES"].split(",")
