"""Acceptance tests of hack/testbed.sh: real namespaces, bridges, veths, TBF and iperf3.

Run as root: /usr/bin/python3 -m pytest -q hack/tests
Throughput checks compare iperf3 against the configured TBF rate (>= 90%; iperf3 sees ~95%
because of L2 overhead), so they hold on a busy machine as long as the rails, not the CPU, are
the bottleneck (rates stay well under the ~4 Gbit/s one core can push). Other suites share the
2 cores, so a throughput check that falls short is measured once more and that run counts:
a shaping bug fails both runs, a CPU blip on a busy machine does not.
"""

import json
import os
import subprocess
import time

import pytest

from testbed_helpers import (
    TESTBED,
    addr,
    can_connect,
    in_host,
    iperf3_client,
    iperf3_mbits,
    iperf3_server,
    listener,
    netns_names,
    tb,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

RATES = (800, 300)  # Mbit/s, rail 0 and rail 1 (the acceptance numbers)
MIN_FRACTION = 0.90
RUNS = 2  # at most; the second only if the first fell short


def best_of(measure, good_enough):
    """Runs MEASURE up to RUNS times; returns the first result GOOD_ENOUGH accepts, else the last."""
    results = []
    for _ in range(RUNS):
        results.append(measure())
        if good_enough(results[-1]):
            return results[-1]
    return results[-1]


@pytest.fixture
def testbed_factory():
    """Creates test beds and always tears them down, even when the test fails."""
    names = []

    def make(name, *args):
        tb("down", "--name", name)  # a previous crashed run must not break this one
        names.append(name)
        tb("up", "--name", name, *args)
        return name

    yield make
    for name in names:
        tb("down", "--name", name, check=False)


@pytest.fixture(scope="module")
def bed():
    """4 hosts x 2 rails shaped 800/300 Mbit/s, shared by the read-mostly tests below."""
    name = "nzt4"
    tb("down", "--name", name)
    tb("up", "--name", name, "--hosts", 4, "--rails", 2, "--rate", ",".join(map(str, RATES)))
    try:
        yield name
    finally:
        tb("down", "--name", name, check=False)


def test_up_creates_namespaces_addresses_and_qdiscs(bed):
    assert {f"{bed}-sw", *(f"{bed}-h{i}" for i in range(4))} <= netns_names()
    for i in range(4):
        for k in range(2):
            assert addr(bed, i, k) == f"10.{100 + k}.0.{10 + i}"
            link = subprocess.run(in_host(bed, i, "ip", "-o", "addr", "show", "dev", f"r{k}"),
                                  capture_output=True, text=True, check=True).stdout
            assert f"10.{100 + k}.0.{10 + i}/24" in link
            qdisc = subprocess.run(in_host(bed, i, "tc", "qdisc", "show", "dev", f"r{k}"),
                                   capture_output=True, text=True, check=True).stdout
            assert f"rate {RATES[k]}Mbit" in qdisc, qdisc
    status = tb("status", "--name", bed).stdout
    assert "4 hosts x 2 rails" in status
    rows = [line.split() for line in status.splitlines()[2:]]
    assert len(rows) == 8
    assert all(row[5] == "up" for row in rows), status
    # Nothing of ours may appear in the root namespace.
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert "br-r0" not in root_links and "h0r0" not in root_links


@pytest.mark.parametrize("rail", [0, 1])
def test_each_rail_alone_reaches_its_rate(bed, rail):
    port = 5301 + rail
    with iperf3_server(bed, 1, port):
        mbits = best_of(
            lambda: iperf3_mbits(iperf3_client(bed, 0, addr(bed, 1, rail), port, src=addr(bed, 0, rail))),
            lambda m: m >= MIN_FRACTION * RATES[rail])
    print(f"rail {rail} alone: {mbits:.0f} Mbit/s (TBF {RATES[rail]})")
    assert mbits >= MIN_FRACTION * RATES[rail], f"rail {rail}: {mbits:.0f} Mbit/s of {RATES[rail]}"
    # TBF really limits: the flow cannot exceed its rail's rate by more than measurement noise.
    assert mbits <= 1.05 * RATES[rail], f"rail {rail}: {mbits:.0f} Mbit/s exceeds {RATES[rail]}"


def test_both_rails_together_each_reach_their_rate(bed):
    def both():
        flows = [iperf3_client(bed, 0, addr(bed, 2, k), 5311 + k, src=addr(bed, 0, k)) for k in range(2)]
        return [iperf3_mbits(f) for f in flows]

    with iperf3_server(bed, 2, 5311), iperf3_server(bed, 2, 5312):
        mbits = best_of(both, lambda m: all(m[k] >= MIN_FRACTION * RATES[k] for k in range(2)))
    print(f"both rails at once: {mbits[0]:.0f} + {mbits[1]:.0f} Mbit/s (TBF {RATES[0]} + {RATES[1]})")
    for k in range(2):
        assert mbits[k] >= MIN_FRACTION * RATES[k], f"rail {k} with both busy: {mbits}"


def test_cut_makes_rail_unreachable_and_restore_brings_it_back(bed):
    port = 5321
    src = [addr(bed, 0, k) for k in range(2)]
    dst = [addr(bed, 3, k) for k in range(2)]
    with listener(bed, 3, port):
        assert can_connect(bed, 0, src[1], dst[1], port)
        tb("cut", "--name", bed, "--host", 3, "--rail", 1)
        try:
            assert not can_connect(bed, 0, src[1], dst[1], port), "rail 1 still reachable after cut"
            assert can_connect(bed, 0, src[0], dst[0], port), "cutting rail 1 broke rail 0"
            row = [line.split() for line in tb("status", "--name", bed).stdout.splitlines()
                   if line.split()[:2] == ["3", "1"]][0]
            assert row[5] == "cut"
        finally:
            tb("restore", "--name", bed, "--host", 3, "--rail", 1)
        # The host kept its address, route and qdisc through the cut.
        assert can_connect(bed, 0, src[1], dst[1], port, timeout=3), "rail 1 unreachable after restore"
        qdisc = subprocess.run(in_host(bed, 3, "tc", "qdisc", "show", "dev", "r1"),
                               capture_output=True, text=True, check=True).stdout
        assert f"rate {RATES[1]}Mbit" in qdisc


def test_tcp_cc_sets_every_host_and_status_reports_it(testbed_factory):
    # reno: the one algorithm the kernel lets every namespace use.
    name = testbed_factory("nzt10", "--hosts", 2, "--rails", 1, "--tcp-cc", "reno")
    for host in (0, 1):
        cc = subprocess.run([TESTBED, "exec", "--name", name, "--host", str(host), "--", "sysctl", "-n",
                             "net.ipv4.tcp_congestion_control"], capture_output=True, text=True, check=True)
        assert cc.stdout.strip() == "reno"
    assert "tcp congestion control reno" in tb("status", "--name", name).stdout


def test_shape_changes_one_host_or_all_and_zero_unshapes(testbed_factory):
    name = testbed_factory("nzt7", "--hosts", 2, "--rails", 2)

    def rates():
        rows = [line.split() for line in tb("status", "--name", name).stdout.splitlines()[2:]]
        return {(int(r[0]), int(r[1])): r[6] for r in rows}

    assert set(rates().values()) == {"unshaped"}
    tb("shape", "--name", name, "--rail", 1, "--rate", 250)
    assert rates() == {(0, 0): "unshaped", (0, 1): "250Mbit", (1, 0): "unshaped", (1, 1): "250Mbit"}
    tb("shape", "--name", name, "--rail", 1, "--rate", 0, "--host", 1)
    assert rates()[(1, 1)] == "unshaped" and rates()[(0, 1)] == "250Mbit"
    tb("shape", "--name", name, "--rail", 1, "--rate", 0, "--host", 1)  # unshaping twice is fine
    # The TBF bucket holds a 64 KiB GSO packet even at low rates (the 128 KiB floor).
    tb("shape", "--name", name, "--rail", 0, "--rate", 100, "--host", 0)
    qdisc = subprocess.run(in_host(name, 0, "tc", "qdisc", "show", "dev", "r0"),
                           capture_output=True, text=True, check=True).stdout
    assert "burst 128Kb" in qdisc, qdisc


def test_same_subnet_needs_policy_routing_per_rail(testbed_factory):
    name = testbed_factory("nzt5", "--hosts", 2, "--rails", 2, "--same-subnet")
    a = [addr(name, 0, k) for k in range(2)]
    b = [addr(name, 1, k) for k in range(2)]
    assert a == ["10.100.0.10", "10.100.1.10"] and b == ["10.100.0.11", "10.100.1.11"]
    port = 5331
    with listener(name, 1, port):
        assert can_connect(name, 0, a[0], b[0], port)
        # Without policy routing both hosts send everything out r0 (first connected route), and
        # a host answers ARP on a rail only for that rail's address: rail 1 does not work.
        assert not can_connect(name, 0, a[1], b[1], port)
        for host, src in ((0, a[1]), (1, b[1])):
            for cmd in (["ip", "rule", "add", "from", src, "table", "101"],
                        ["ip", "route", "add", "10.100.0.0/16", "dev", "r1", "src", src, "table", "101"]):
                subprocess.run(in_host(name, host, *cmd), check=True)
        assert can_connect(name, 0, a[1], b[1], port, timeout=3)


def rx_bytes(name, host, iface):
    out = subprocess.run(in_host(name, host, "ip", "-j", "-s", "link", "show", "dev", iface),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["stats64"]["rx"]["bytes"]


@pytest.mark.parametrize("server_bind", ["wildcard", "rail0"])
def test_mptcp_spreads_one_connection_over_both_rails(testbed_factory, server_bind):
    name = testbed_factory("nzt8", "--hosts", 2, "--rails", 2, "--rate", "800,300", "--mptcp")
    port = 5341
    server_addr = addr(name, 1, 0)
    # "rail0": the server is bound to its rail-0 address only, like Gloo. The extra subflow must
    # still reach host 1 on rail 1 (it joins through the kernel's own listener, not the app's).
    bind = server_addr if server_bind == "rail0" else None
    before = [rx_bytes(name, 1, f"r{k}") for k in range(2)]
    with iperf3_server(name, 1, port, mptcp=True, bind=bind):
        # One connection, addressed to rail 0 only.
        mbits = iperf3_mbits(iperf3_client(name, 0, server_addr, port, mptcp=True))
    received = [rx_bytes(name, 1, f"r{k}") - before[k] for k in range(2)]
    share = received[1] / sum(received)
    print(f"one MPTCP connection ({server_bind} server) over 800+300 rails: {mbits:.0f} Mbit/s, "
          f"{share:.0%} of bytes on rail 1")
    # Rail 1 carried a real share of the data (its fair share is 300/1100 = 27%). Asserted on
    # byte counters, not on throughput, so a busy CPU cannot fail it.
    assert share > 0.10, f"rail 1 carried {received[1]} of {sum(received)} bytes"


def test_two_testbeds_coexist_and_are_isolated(bed, testbed_factory):
    other = testbed_factory("nzt6", "--hosts", 2, "--rails", 1)
    # Same addresses in both, different namespaces: each sees only its own hosts.
    assert addr(other, 0, 0) == addr(bed, 0, 0)
    port = 5351
    with listener(other, 1, port):
        assert can_connect(other, 0, "10.100.0.10", "10.100.0.11", port)
        # Host 1 of `bed` does not run this listener, so the same address pair is refused there.
        assert not can_connect(bed, 0, "10.100.0.10", "10.100.0.11", port)
    tb("down", "--name", other)
    assert not any(n.startswith(f"{other}-") for n in netns_names())
    assert {f"{bed}-sw", f"{bed}-h0"} <= netns_names()
    assert "4 hosts x 2 rails" in tb("status", "--name", bed).stdout


def test_down_is_idempotent_and_ends_processes_inside(testbed_factory):
    tb("down", "--name", "nzt9")  # never created: fine
    name = testbed_factory("nzt9", "--hosts", 2, "--rails", 1)
    sleeper = subprocess.Popen(in_host(name, 1, "sleep", "600"))
    try:
        time.sleep(0.2)
        tb("down", "--name", name)
        assert sleeper.wait(timeout=10) is not None
        assert not any(n.startswith(f"{name}-") for n in netns_names())
        tb("down", "--name", name)
        missing = tb("status", "--name", name, check=False)
        assert missing.returncode != 0 and "no test bed named 'nzt9'" in missing.stderr
    finally:
        sleeper.kill()


def test_up_refuses_an_existing_testbed(bed):
    proc = tb("up", "--name", bed, "--hosts", 1, "--rails", 1, check=False)
    assert proc.returncode != 0 and "already exists" in proc.stderr
    assert "4 hosts x 2 rails" in tb("status", "--name", bed).stdout  # left intact


@pytest.mark.parametrize(
    "args, flag",
    [
        (["up", "--hosts", "2", "--rails", "1"], "--name"),
        (["up", "--name", "toolongname", "--hosts", "2", "--rails", "1"], "--name"),
        (["up", "--name", "Bad", "--hosts", "2", "--rails", "1"], "--name"),
        (["up", "--name", "nzt3", "--hosts", "0", "--rails", "1"], "--hosts"),
        (["up", "--name", "nzt3", "--hosts", "x", "--rails", "1"], "--hosts"),
        (["up", "--name", "nzt3", "--hosts", "2"], "--rails"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "99"], "--rails"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "2", "--rate", "800"], "--rate"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "2", "--rate", "800,fast"], "--rate"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "2", "--bogus"], "--bogus"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "2", "--tcp-cc", "BBR!"], "--tcp-cc"),
        (["up", "--name", "nzt3", "--hosts", "2", "--rails", "2", "--tcp-cc", "nosuchcc"], "--tcp-cc"),
        (["up", "--name"], "--name"),
        (["down", "--name", "nzt3", "--hosts", "2"], "--hosts"),
        (["frobnicate", "--name", "nzt3"], "frobnicate"),
    ],
)
def test_bad_arguments_name_the_flag(args, flag):
    proc = tb(*args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr, proc.stderr
    assert not any(n.startswith("nzt3-") for n in netns_names())


@pytest.mark.parametrize(
    "args, flag",
    [
        (["addr", "--host", "9", "--rail", "0"], "--host"),
        (["addr", "--host", "0", "--rail", "2"], "--rail"),
        (["addr", "--host", "0"], "--rail"),
        (["cut", "--rail", "0"], "--host"),
        (["shape", "--rail", "0", "--rate", "-5"], "--rate"),
        (["shape", "--rail", "0"], "--rate"),
        (["exec", "--host", "0"], "exec"),
    ],
)
def test_bad_arguments_on_an_existing_testbed(bed, args, flag):
    proc = tb(args[0], "--name", bed, *args[1:], check=False)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr, proc.stderr


def test_exec_passes_exit_status_and_runs_inside_the_host(bed):
    out = subprocess.run([TESTBED, "exec", "--name", bed, "--host", "2", "--", "ip", "-o", "-4", "addr"],
                         capture_output=True, text=True, check=True).stdout
    assert "10.100.0.12/24" in out and "10.101.0.12/24" in out
    rc = subprocess.run([TESTBED, "exec", "--name", bed, "--host", "2", "--", "sh", "-c", "exit 7"]).returncode
    assert rc == 7
