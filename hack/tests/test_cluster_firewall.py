"""The local cluster's pod-bridge FORWARD rules (hack/lib/cluster-host.sh cluster_firewall_up/down)
on a host that drops forwarding the way Docker leaves one: br_netfilter on, FORWARD policy DROP.

Everything happens inside network namespaces this test creates: a "host" namespace standing in for
the root one (its own iptables, its own pod bridge nzcbr0) and two "pod" namespaces plugged into
that bridge. The real shell functions run in the host namespace.

Run as root: /usr/bin/python3 -m pytest -q hack/tests
"""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

PODS = {"a": "10.244.0.2", "b": "10.244.0.3"}
# Connect with a 3 s timeout: a dropped SYN is what the failure looks like.
CONNECT = """
import socket, sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except OSError as e:
    print("failed", e)
"""


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def in_ns(ns, *argv, check=True):
    return sh("ip", "netns", "exec", ns, *argv, check=check)


def cluster_fn(ns, fn):
    """Runs a function of hack/lib/cluster-host.sh in namespace NS."""
    script = (f'PROG=test; source "{REPO}/hack/lib/common.sh"; source "{REPO}/hack/lib/cluster-env.sh"; '
              f'source "{REPO}/hack/lib/cluster-host.sh"; {fn}')
    return in_ns(ns, "bash", "-c", script)


@pytest.fixture
def bed():
    if not os.path.isdir("/proc/sys/net/bridge"):
        if sh("modprobe", "br_netfilter", check=False).returncode != 0:
            pytest.skip("needs the br_netfilter module")
    tag = f"nzu{os.getpid() % 100000}"
    host, pods = f"{tag}-host", {p: f"{tag}-{p}" for p in PODS}
    try:
        sh("ip", "netns", "add", host)
        in_ns(host, "ip", "link", "add", "nzcbr0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
        in_ns(host, "ip", "link", "set", "nzcbr0", "up")
        for p, ip in PODS.items():
            ns = pods[p]
            sh("ip", "netns", "add", ns)
            in_ns(host, "ip", "link", "add", f"v{p}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            in_ns(host, "ip", "link", "set", f"v{p}", "master", "nzcbr0", "up")
            in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
            in_ns(ns, "ip", "link", "set", "eth0", "up")
            in_ns(ns, "ip", "link", "set", "lo", "up")
        in_ns(host, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1")
        in_ns(host, "iptables", "-P", "FORWARD", "DROP")
        yield host, pods
    finally:
        for ns in [host, *pods.values()]:
            sh("ip", "netns", "del", ns, check=False)


def reaches(pods, src, dst):
    server = subprocess.Popen(["ip", "netns", "exec", pods[dst], "python3", "-c",
                               "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 7000)); s.listen(); "
                               "print('ready', flush=True); s.accept()"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        out = in_ns(pods[src], "python3", "-c", CONNECT, PODS[dst], "7000").stdout
        return out.startswith("connected")
    finally:
        server.kill()
        server.wait()


def test_pod_bridge_rules_open_forward_drop_and_go_away(bed):
    host, pods = bed
    before = in_ns(host, "iptables-save", "-t", "filter").stdout
    assert not reaches(pods, "a", "b"), "the bed does not drop bridged traffic: it reproduces nothing"

    cluster_fn(host, "cluster_firewall_up")
    assert reaches(pods, "a", "b") and reaches(pods, "b", "a")
    rules = in_ns(host, "iptables", "-S", "FORWARD").stdout
    assert rules.startswith("-P FORWARD DROP"), rules  # the policy is left alone
    assert "-j NEZHA-LOCAL-CLUSTER" in rules.splitlines()[1], rules  # first rule of FORWARD
    cluster_fn(host, "cluster_firewall_up")  # idempotent: still one jump, two rules
    assert in_ns(host, "iptables", "-S", "FORWARD").stdout.count("NEZHA-LOCAL-CLUSTER") == 1
    assert len(in_ns(host, "iptables", "-S", "NEZHA-LOCAL-CLUSTER").stdout.splitlines()) == 3

    cluster_fn(host, "cluster_firewall_down")
    after = in_ns(host, "iptables-save", "-t", "filter").stdout
    strip = lambda s: [l.split(" [")[0] for l in s.splitlines() if not l.startswith("#")]
    assert strip(after) == strip(before)
    assert not reaches(pods, "a", "b")
    cluster_fn(host, "cluster_firewall_down")  # idempotent
