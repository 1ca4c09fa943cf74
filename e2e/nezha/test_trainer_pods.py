"""Pods made by another controller (shaped as Kubeflow Trainer v2's torch `node` pods) get their
rails from the operator's pod webhook, installed by the chart: label nezha.io/inject=true and
annotation nezha.io/railclasses (operator/README.md "Pods of other controllers"). No Trainer or
JobSet controller runs here: the test creates the Job a JobSet would (controlled by a JobSet
reference) and the Job controller makes the pod, so the webhook follows the pod's real controller
chain (pod -> Job -> JobSet; docs/security.md "Tenant model"). A pod that merely copies the
group's labels gets nothing."""

import json

import pytest

from product_helpers import (JOB_NAMESPACE, MANIFESTS, RAIL_CLASSES, RAIL_SUBNET_PREFIXES, RELEASE_NAMESPACE, condition,
                             wait_for)

GROUP = "nze-trainjob"
JOB = f"{GROUP}-node-0"
POD_HOST = f"{JOB}-0"  # an Indexed Job's pod hostname, as Trainer's PET_MASTER_ADDR names it
# The JobSet the Job names as its controller. Its kind is not served here (test_kubeflow.py
# uninstalls JobSet), so the garbage collector cannot resolve it and leaves the Job alone; with
# the kind served it would delete the Job as the dependent of a JobSet that does not exist.
JOBSET_REF = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": GROUP,
              "uid": "6f1c1f5e-7c55-4f7e-9d0a-000000e2e001", "controller": True}
TOKEN_FILE = "/var/run/nezha/job-token/token"


@pytest.fixture(scope="module")
def rails(kube, installed_release):
    # RailClasses pass the operator's validating webhook: wait for the operator first.
    def available():
        d = kube.get("deployment", "nezha-operator", RELEASE_NAMESPACE, check=False)
        return d and condition(d, "Available").get("status") == "True"
    wait_for("the operator Deployment Available", available)
    for i in range(len(RAIL_CLASSES)):
        kube.apply(MANIFESTS / f"railclass-rail{i}.yaml")
    return RAIL_CLASSES


def node_pod_template(annotations):
    return {
        "metadata": {"labels": {"nezha.io/inject": "true", "jobset.sigs.k8s.io/jobset-name": GROUP,
                                "jobset.sigs.k8s.io/replicatedjob-name": "node"},
                     "annotations": annotations},
        "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": "Never", "containers": [{
            "name": "node", "image": "nezha/runtime:0.1.0", "imagePullPolicy": "Never", "command": ["sleep", "3600"],
            "env": [{"name": "PET_MASTER_ADDR", "value": f"{POD_HOST}.{GROUP}"}, {"name": "PET_NNODES", "value": "1"}]}]},
    }


def node_job(annotations):
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": JOB, "namespace": JOB_NAMESPACE, "ownerReferences": [JOBSET_REF]},
        "spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1, "backoffLimit": 0,
                 "template": node_pod_template(annotations)},
    }


def job_pod(kube):
    pods = kube.get("pods", namespace=JOB_NAMESPACE)["items"]
    mine = [p for p in pods if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == JOB]
    return mine[0] if mine else None


def test_trainer_node_pod_gets_rails_from_the_webhook(kube, rails):
    if kube.get("crd", "jobsets.jobset.x-k8s.io", check=False):
        pytest.skip("the JobSet kind is served here: the garbage collector would delete a Job whose JobSet does not exist")
    try:
        kube.kubectl("apply", "-f", "-", input_text=json.dumps(node_job({"nezha.io/railclasses": ",".join(rails)})))

        def ready():
            p = job_pod(kube)
            return p and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])) and p
        pod = wait_for("the webhook-injected pod of the Job Ready", ready)
        name = pod["metadata"]["name"]
        status = {s["interface"]: s for s in json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])}
        for i, prefix in enumerate(RAIL_SUBNET_PREFIXES):
            assert status[f"nz{i}"]["name"] == f"{JOB_NAMESPACE}/{GROUP}-{rails[i]}", status
            assert status[f"nz{i}"]["ips"][0].startswith(prefix), status
        env = kube.kubectl("exec", "-n", JOB_NAMESPACE, name, "--", "env").stdout
        assert f"NEZHA_RAILS={rails[0]}=nz0:tcp@10000" in env, env
        assert f"NEZHA_RENDEZVOUS={POD_HOST}.{GROUP}:29400" in env, env
        # The token is a mounted read-only file, not an environment variable children inherit.
        assert f"NEZHA_JOB_TOKEN_FILE={TOKEN_FILE}" in env and "NEZHA_JOB_TOKEN=" not in env, env
        token = kube.kubectl("exec", "-n", JOB_NAMESPACE, name, "--", "cat", TOKEN_FILE).stdout
        assert len(token.strip()) == 64, "the token file should hold 64 hex digits"
        # The group's Secret and NetworkPolicy are controlled by the JobSet, never adopted.
        for kind, obj in (("secret", f"{GROUP}-token"), ("networkpolicy", f"{GROUP}-workers")):
            got = kube.get(kind, obj, JOB_NAMESPACE)
            assert [(r["kind"], r["uid"]) for r in got["metadata"]["ownerReferences"]] == [("JobSet", JOBSET_REF["uid"])], got

        # A bare pod copying the group's labels (no controller chain) gets no rails and no token.
        forged = {"apiVersion": "v1", "kind": "Pod", **node_pod_template({"nezha.io/railclasses": ",".join(rails)})}
        forged["metadata"] |= {"name": f"{GROUP}-forged", "namespace": JOB_NAMESPACE}
        refused = kube.kubectl("apply", "-f", "-", check=False, input_text=json.dumps(forged))
        assert refused.returncode != 0 and "pod has no controller" in refused.stderr, refused.stderr

        bare = {**forged, "metadata": {**forged["metadata"], "name": f"{GROUP}-bad", "annotations": {}}}
        refused = kube.kubectl("apply", "-f", "-", check=False, input_text=json.dumps(bare))
        assert refused.returncode != 0 and "nezha.io/railclasses" in refused.stderr, refused.stderr
    finally:
        kube.kubectl("delete", "job", "-n", JOB_NAMESPACE, JOB, "--ignore-not-found", "--wait=true",
                     "--cascade=foreground", check=False)
        kube.kubectl("delete", "pod", "-n", JOB_NAMESPACE, f"{GROUP}-forged", f"{GROUP}-bad", "--ignore-not-found",
                     "--wait=true", check=False)
        kube.kubectl("delete", "secret", "-n", JOB_NAMESPACE, f"{GROUP}-token", "--ignore-not-found", check=False)
        kube.kubectl("delete", "networkpolicy", "-n", JOB_NAMESPACE, f"{GROUP}-workers", "--ignore-not-found", check=False)
        kube.kubectl("delete", "network-attachment-definitions", "-n", JOB_NAMESPACE,
                     *[f"{GROUP}-{r}" for r in rails], "--ignore-not-found", check=False)
