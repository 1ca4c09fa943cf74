"""End to end on a real single-node Kubernetes (hack/local-cluster.sh): node Ready, a pod with two
macvlan rails from NetworkAttachmentDefinitions, DNS for a headless Service through CoreDNS, rail
traffic between two pods, pod-to-pod traffic with the host's FORWARD policy set to DROP (as Docker
leaves it), and a host left exactly as found after `down`.

Run as root: /usr/bin/python3 -m pytest -q e2e/cluster   (the tests run in file order; the last
one takes the cluster down and compares the host with the snapshot taken before `up`).
"""

import json
import os
import re
import subprocess
import time

import cluster_host_state as host_state
from cluster_helpers import EXTRA_PLUGIN, STATE_DIR, kube_version, local_cluster

# No registry in the name, as the chart names Nezha's images: containerd and the kubelet must
# agree on the normalised name.
BUSYBOX = "nzt/busybox:1"
APPLETS = ["sh", "sleep", "ip", "nslookup", "ping", "cat", "hostname", "wget", "ssl_client"]
# Rail K of the test pods: macvlan on host veth nzrK, its own subnet (like the test bed's rails).
RAIL_SUBNETS = ["10.100.0.0/24", "10.101.0.0/24"]


def test_up_gives_a_ready_node(cluster):
    node = cluster.get("node", cluster.node)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"][0]
    assert ready["status"] == "True", ready
    assert node["status"]["nodeInfo"]["kubeletVersion"] == kube_version()
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == "10.250.0.1"
    # The NetworkAttachmentDefinition CRD came from the client module and is served.
    crd = cluster.get("crd", "network-attachment-definitions.k8s.cni.cncf.io")
    assert crd["status"]["acceptedNames"]["kind"] == "NetworkAttachmentDefinition"
    assert local_cluster("status").returncode == 0


def test_second_up_is_refused_and_leaves_the_cluster_running(cluster):
    proc = local_cluster("up", check=False)
    assert proc.returncode != 0 and "run: local-cluster.sh down" in proc.stderr, proc.stderr
    assert local_cluster("status").returncode == 0


def test_load_image_imports_a_docker_archive(cluster, imagebuilder, tmp_path):
    tarball = tmp_path / "busybox.tar"
    cmd = [imagebuilder, "--tag", BUSYBOX, "--output", str(tarball),
           "--file", "/bin/busybox:/bin/busybox", "--env", "PATH=/bin", "--cmd", '["sh"]']
    for applet in APPLETS:
        cmd += ["--symlink", f"/bin/{applet}=busybox"]
    subprocess.run(cmd, check=True, capture_output=True)
    local_cluster("load-image", str(tarball))
    missing = local_cluster("load-image", str(tmp_path / "nope.tar"), check=False)
    assert missing.returncode != 0 and "no such file" in missing.stderr


def nad(name, master, subnet, plugin="macvlan"):
    config = {
        "cniVersion": "1.0.0", "type": plugin, "master": master, "mode": "bridge",
        "ipam": {"type": "host-local", "dataDir": f"{STATE_DIR}/cni/ipam", "ranges": [[{"subnet": subnet}]]},
    }
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"config": json.dumps(config)}}


def pod(name):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "nzt-rails"},
                     "annotations": {"k8s.v1.cni.cncf.io/networks": "nzt-rail0,nzt-rail1"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"]}],
        },
    }


def test_pod_with_two_rails_and_headless_dns(cluster, cluster_run):
    # Rail 1 goes through the extra plugin passed to `up` (NEZHA_CLUSTER_CNI_PLUGINS).
    for k, subnet in enumerate(RAIL_SUBNETS):
        cluster.apply(nad(f"nzt-rail{k}", cluster.rails[k], subnet, plugin=["macvlan", EXTRA_PLUGIN][k]))
    cluster.apply({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "nzt-rails", "namespace": "default"},
                   "spec": {"clusterIP": "None", "selector": {"app": "nzt-rails"},
                            "ports": [{"name": "x", "port": 7000}]}})
    for name in ("nzt-a", "nzt-b"):
        cluster.apply(pod(name))
    for name in ("nzt-a", "nzt-b"):
        cluster.wait_ready(name)

    pods = {}
    for name in ("nzt-a", "nzt-b"):
        obj = cluster.get("pod", name)
        status = json.loads(obj["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
        by_name = {s["name"]: s for s in status}
        assert set(by_name) == {"nezha-pod-network", "default/nzt-rail0", "default/nzt-rail1"}, status
        assert by_name["default/nzt-rail0"]["interface"] == "net1"
        assert by_name["default/nzt-rail1"]["interface"] == "net2"
        assert by_name["nezha-pod-network"].get("default") is True
        pods[name] = {"eth0": obj["status"]["podIP"],
                      "net1": by_name["default/nzt-rail0"]["ips"][0],
                      "net2": by_name["default/nzt-rail1"]["ips"][0]}
        links = cluster.kubectl("exec", name, "--", "ip", "-o", "-4", "addr")
        for iface, ip in pods[name].items():
            assert f"{iface} inet {ip}/" in " ".join(links.split()), links
    assert pods["nzt-a"]["eth0"].startswith("10.244.0.")
    assert pods["nzt-a"]["net1"].startswith("10.100.0.") and pods["nzt-a"]["net2"].startswith("10.101.0.")

    # Each rail carries traffic between the pods on its own subnet.
    for iface in ("net1", "net2"):
        out = cluster.kubectl("exec", "nzt-a", "--", "ping", "-c", "1", "-W", "3", "-I", iface, pods["nzt-b"][iface])
        assert "1 packets received" in out, out

    # The headless Service name resolves through CoreDNS to both pods' eth0 addresses.
    fqdn = "nzt-rails.default.svc.cluster.local"
    deadline = time.monotonic() + 30
    while True:
        proc = subprocess.run([cluster.kubectl_bin, "--kubeconfig", cluster.kubeconfig, "exec", "nzt-a", "--",
                               "nslookup", fqdn], capture_output=True, text=True)
        if all(pods[p]["eth0"] in proc.stdout for p in pods) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert all(pods[p]["eth0"] in proc.stdout for p in pods), proc.stdout + proc.stderr
    # Names outside the cluster get a fast NXDOMAIN rather than a timeout (no upstream).
    proc = subprocess.run([cluster.kubectl_bin, "--kubeconfig", cluster.kubeconfig, "exec", "nzt-a", "--",
                           "nslookup", "nothing.invalid"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "NXDOMAIN" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    # In-cluster API access the way client-go does it: the `kubernetes` Service name, port 443,
    # the pod's service-account token (forwarded to the loopback-bound apiserver).
    script = ('wget -q -O - --header "Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" '
              'https://kubernetes.default.svc.cluster.local/api')
    out = cluster.kubectl("exec", "nzt-a", "--", "sh", "-c", script)
    assert '"kind": "APIVersions"' in out, out

    # What the host looks like with the cluster and two pods running: the last test checks that
    # the snapshot really sees the cluster's footprint, so "unchanged after down" means something.
    cluster_run["during"] = host_state.snapshot(STATE_DIR)


def test_pods_reach_each_other_where_forwarding_is_dropped(cluster):
    """A host where Docker was installed: br_netfilter on and the FORWARD policy DROP. Pod to
    pod over the pod bridge (eth0, where rendezvous happens) still works, through the cluster's
    own ACCEPT rules (hack/lib/cluster-host.sh); the policy is put back afterwards."""
    a, b = (cluster.get("pod", n)["status"]["podIP"] for n in ("nzt-a", "nzt-b"))
    policy = re.search(r"^-P FORWARD (\w+)", subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True,
                                                             text=True, check=True).stdout, re.M).group(1)
    bridge_nf = "/proc/sys/net/bridge/bridge-nf-call-iptables"
    if not os.path.exists(bridge_nf):
        subprocess.run(["modprobe", "br_netfilter"], check=True)
    with open(bridge_nf) as f:
        bridge_nf_before = f.read().strip()
    try:
        with open(bridge_nf, "w") as f:
            f.write("1")
        subprocess.run(["iptables", "-P", "FORWARD", "DROP"], check=True)
        out = cluster.kubectl("exec", "nzt-a", "--", "ping", "-c", "1", "-W", "3", b)
        assert "1 packets received" in out, out
        out = cluster.kubectl("exec", "nzt-b", "--", "ping", "-c", "1", "-W", "3", a)
        assert "1 packets received" in out, out
        rules = subprocess.run(["iptables", "-S", "NEZHA-LOCAL-CLUSTER"], capture_output=True, text=True,
                               check=True).stdout
        assert "-s 10.244.0.0/24 -i nzcbr0 -j ACCEPT" in rules, rules
    finally:
        subprocess.run(["iptables", "-P", "FORWARD", policy], check=True)
        with open(bridge_nf, "w") as f:
            f.write(bridge_nf_before)


def test_down_restores_the_host(cluster_run, host_before):
    # Leave the test pods running: `down` must clean up after live pods too.
    started = time.monotonic()
    local_cluster("down")
    cluster_run["up"] = False
    print(f"local-cluster.sh down took {time.monotonic() - started:.1f}s")
    after = host_state.snapshot(STATE_DIR)
    during = cluster_run.get("during")
    if during is not None:
        seen = {d.split(":")[0] for d in host_state.differences(host_before, during)}
        # The kubelet rewrote kernel.panic & co., the pods had cni-* netns, mounts and cgroups.
        expected = {"processes", "links", "cni_netns", "mounts", "sysctls", "cgroups", "paths", "state_dir",
                    "iptables"}
        if host_before["sysctls"] == during["sysctls"]:
            # Already at the kubelet's values before we started: another kubelet on this kernel
            # set them (a kind node's, which shares the host's /proc/sys) and nothing restores them.
            expected.discard("sysctls")
        assert expected <= seen, (expected - seen, seen)
    diffs = host_state.differences(host_before, after)
    assert not diffs, "the host differs after down:\n" + "\n".join(diffs)
    # down is idempotent.
    local_cluster("down")
