"""Backend "nezha" between two namespace "hosts" with two real rails each (hack/testbed.sh, root).

Shows that a torch.distributed job's allreduce traffic really leaves through both rails, measured
by the kernel's per-interface counters (the C API exposes no per-rail metrics yet).
"""
import os
import subprocess
import threading
import time

import pytest

import nezha_launch as launch

TESTBED = os.path.join(launch.REPO, "hack", "testbed.sh")
BED = "nztpy"  # this suite's prefix: nzt
ELEMENTS = 4 << 20  # 16 MiB of float32 per allreduce: far above the cold threshold (hot start)
ITERS = 8

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def bed(*args):
    return subprocess.run([TESTBED, *args], check=True, capture_output=True, text=True, timeout=120).stdout


def tx_bytes(host, rail):
    out = subprocess.run(["ip", "netns", "exec", f"{BED}-h{host}", "cat",
                          f"/sys/class/net/r{rail}/statistics/tx_bytes"],
                         check=True, capture_output=True, text=True)
    return int(out.stdout)


@pytest.fixture
def two_host_bed():
    bed("down", "--name", BED)
    try:
        bed("up", "--name", BED, "--hosts", "2", "--rails", "2")
        yield
    finally:
        bed("down", "--name", BED)


def test_allreduce_traffic_uses_both_rails(two_host_bed):
    env = launch.base_env(2, rails="r0=r0:tcp,r1=r1:tcp")
    env["MASTER_ADDR"] = bed("addr", "--name", BED, "--host", "0", "--rail", "0").strip()
    env.update(ELEMENTS=str(ELEMENTS), ITERS=str(ITERS), NEZHA_PROBE_BYTES="1M")
    before = {(h, r): tx_bytes(h, r) for h in range(2) for r in range(2)}
    results = launch.run("rail_traffic", 2, env,
                         prefix=lambda rank: [TESTBED, "exec", "--name", BED, "--host", str(rank), "--"])
    assert all(rc == 0 for rc, _, _ in results), launch.describe(results)
    sent = {k: tx_bytes(*k) - v for k, v in before.items()}
    payload = ELEMENTS * 4 * ITERS  # a 2-rank ring allreduce sends the buffer's size per rank
    for host in range(2):
        total = sent[(host, 0)] + sent[(host, 1)]
        assert total >= 0.95 * payload, (host, sent, payload)
        for rail in range(2):
            assert sent[(host, rail)] >= 0.15 * payload, f"rail r{rail} of host {host} carried too little: {sent}"


def test_training_survives_a_cut_rail(two_host_bed, tmp_path):
    """Rail r1 of host 1 loses carrier mid-job: every allreduce before and after must still be
    correct (libnezha replays the failed slice on r0 and continues without r1)."""
    env = launch.base_env(2, rails="r0=r0:tcp,r1=r1:tcp")
    env["MASTER_ADDR"] = bed("addr", "--name", BED, "--host", "0", "--rail", "0").strip()
    request, done = tmp_path / "cut-request", tmp_path / "cut-done"
    env.update(ELEMENTS=str(1 << 20), ITERS="12", CUT_AT="4", NEZHA_IO_TIMEOUT_MS="3000",
               CUT_REQUEST=str(request), CUT_DONE=str(done))

    def cut_when_asked():
        for _ in range(1200):
            if request.exists():
                bed("cut", "--name", BED, "--host", "1", "--rail", "1")
                break
            time.sleep(0.05)
        done.touch()  # also on timeout, so rank 0 never waits forever

    cutter = threading.Thread(target=cut_when_asked)
    cutter.start()
    try:
        results = launch.run("rail_cut", 2, env,
                             prefix=lambda rank: [TESTBED, "exec", "--name", BED, "--host", str(rank), "--"])
    finally:
        done.touch()
        cutter.join()
    assert request.exists(), launch.describe(results)
    reports = [r for _, r, _ in results]
    assert all(r is not None for r in reports), launch.describe(results)
    for r in reports:
        assert r["error"] is None, reports
        assert r["correct"] == 12, reports
