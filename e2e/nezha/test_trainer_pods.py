"""Pods made by another controller (shaped as Kubeflow Trainer v2's torch `node` pods) get their
rails from the operator's pod webhook, installed by the chart: label nezha.io/inject=true and
annotation nezha.io/railclasses (operator/README.md "Pods of other controllers"). No Trainer or
JobSet controller runs here; the pod is created directly, as the Job controller would."""

import json

import pytest

from product_helpers import (JOB_NAMESPACE, MANIFESTS, RAIL_CLASSES, RAIL_SUBNET_PREFIXES, RELEASE_NAMESPACE, condition,
                             wait_for)

GROUP = "nze-trainjob"
POD = f"{GROUP}-node-0-0"


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


def node_pod(name, annotations):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": JOB_NAMESPACE,
                     "labels": {"nezha.io/inject": "true", "jobset.sigs.k8s.io/jobset-name": GROUP,
                                "jobset.sigs.k8s.io/replicatedjob-name": "node"},
                     "annotations": annotations},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "node", "image": "nezha/runtime:0.1.0", "imagePullPolicy": "Never", "command": ["sleep", "3600"],
            "env": [{"name": "PET_MASTER_ADDR", "value": f"{POD}.{GROUP}"}, {"name": "PET_NNODES", "value": "1"}]}]},
    }


def test_trainer_node_pod_gets_rails_from_the_webhook(kube, rails):
    try:
        kube.kubectl("apply", "-f", "-", input_text=json.dumps(node_pod(POD, {"nezha.io/railclasses": ",".join(rails)})))

        def ready():
            p = kube.get("pod", POD, JOB_NAMESPACE, check=False)
            return p and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])) and p
        pod = wait_for("the webhook-injected pod Ready", ready)
        status = {s["interface"]: s for s in json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])}
        for i, prefix in enumerate(RAIL_SUBNET_PREFIXES):
            assert status[f"nz{i}"]["name"] == f"{JOB_NAMESPACE}/{GROUP}-{rails[i]}", status
            assert status[f"nz{i}"]["ips"][0].startswith(prefix), status
        env = kube.kubectl("exec", "-n", JOB_NAMESPACE, POD, "--", "env").stdout
        assert f"NEZHA_RAILS={rails[0]}=nz0:tcp@10000" in env, env
        assert f"NEZHA_RENDEZVOUS={POD}.{GROUP}:29400" in env, env
        assert kube.get("secret", f"{GROUP}-token", JOB_NAMESPACE)

        refused = kube.kubectl("apply", "-f", "-", check=False, input_text=json.dumps(node_pod(f"{GROUP}-bad", {})))
        assert refused.returncode != 0 and "nezha.io/railclasses" in refused.stderr, refused.stderr
    finally:
        kube.kubectl("delete", "pod", "-n", JOB_NAMESPACE, POD, f"{GROUP}-bad", "--ignore-not-found", "--wait=true", check=False)
        kube.kubectl("delete", "secret", "-n", JOB_NAMESPACE, f"{GROUP}-token", "--ignore-not-found", check=False)
        kube.kubectl("delete", "network-attachment-definitions", "-n", JOB_NAMESPACE,
                     *[f"{GROUP}-{r}" for r in rails], "--ignore-not-found", check=False)
