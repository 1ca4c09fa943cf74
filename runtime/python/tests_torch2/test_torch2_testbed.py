"""The c10d backend "nezha" between two namespace "hosts" of hack/testbed.sh with two real veth
rails each (root): a job's allreduce traffic really leaves through both rails (the kernel's
per-interface counters), and DDP survives rail r1 of host 1 losing carrier (`testbed.sh cut`)
in the middle of training: it continues on r0 and every loss equals the uncut run's."""
import os
import subprocess
import threading
import time

import pytest

import launch

TESTBED = os.path.join(launch.REPO, "hack", "testbed.sh")
BED = "nzttc"  # this suite's prefix: nzt (torch cut)
STEPS, CUT_AT = 10, 4

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def bed(*args):
    return subprocess.run([TESTBED, *args], check=True, capture_output=True, text=True,
                          timeout=120).stdout


@pytest.fixture
def two_host_bed():
    bed("down", "--name", BED)
    try:
        bed("up", "--name", BED, "--hosts", "2", "--rails", "2")
        yield
    finally:
        bed("down", "--name", BED)


def bed_env():
    env = launch.base_env(2)
    env["NEZHA_RAILS"] = "r0=r0:tcp,r1=r1:tcp"
    env["MASTER_ADDR"] = bed("addr", "--name", BED, "--host", "0", "--rail", "0").strip()
    env["NEZHA_IO_TIMEOUT_MS"] = "5000"
    return env


def on_host(rank):
    return [TESTBED, "exec", "--name", BED, "--host", str(rank), "--"]


def test_ddp_survives_a_rail_cut(two_host_bed, tmp_path):
    args = ["nezha", "ddp", str(STEPS)]
    uncut = launch.reports(launch.run("train", 2, bed_env(), args, prefix=on_host))[0]

    request, done = tmp_path / "cut-request", tmp_path / "cut-done"
    env = dict(bed_env(), CUT_REQUEST=str(request), CUT_DONE=str(done))

    def cut_when_asked():
        for _ in range(2400):
            if request.exists():
                bed("cut", "--name", BED, "--host", "1", "--rail", "1")
                break
            time.sleep(0.05)
        done.touch()  # also on timeout, so rank 0 never waits forever

    cutter = threading.Thread(target=cut_when_asked)
    cutter.start()
    try:
        results = launch.run("train", 2, env, args + [str(CUT_AT)], prefix=on_host)
    finally:
        done.touch()
        cutter.join()
    assert request.exists(), launch.describe(results)
    reps = launch.reports(results)
    assert reps[0]["losses"] == reps[1]["losses"]
    assert reps[0]["failovers"] >= 1, reps
    assert reps[0]["losses"] == pytest.approx(uncut["losses"], rel=1e-4, abs=1e-5)


def tx_bytes(host, rail):
    out = subprocess.run(["ip", "netns", "exec", f"{BED}-h{host}", "cat",
                          f"/sys/class/net/r{rail}/statistics/tx_bytes"],
                         check=True, capture_output=True, text=True)
    return int(out.stdout)


def test_allreduce_traffic_uses_both_rails(two_host_bed):
    elements, iters = 4 << 20, 8  # 16 MiB of float32: far above the cold threshold (hot start)
    env = dict(bed_env(), ELEMENTS=str(elements), ITERS=str(iters), NEZHA_PROBE_BYTES="1M")
    before = {(h, r): tx_bytes(h, r) for h in range(2) for r in range(2)}
    launch.reports(launch.run("rail_traffic", 2, env, prefix=on_host))
    sent = {k: tx_bytes(*k) - v for k, v in before.items()}
    payload = elements * 4 * iters  # a 2-rank allreduce sends the buffer's size per rank
    for host in range(2):
        assert sent[(host, 0)] + sent[(host, 1)] >= 0.95 * payload, (host, sent, payload)
        for rail in range(2):
            assert sent[(host, rail)] >= 0.15 * payload, f"rail r{rail} of host {host} carried too little: {sent}"
