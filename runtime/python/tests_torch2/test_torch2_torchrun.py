"""torchrun --max-restarts with the nezha backend: a worker killed in the first attempt, the
whole group restarted by torchrun's agent, the new attempt's nezha group exact."""
import json
import os
import subprocess
import sys

import launch

WORKER = os.path.join(launch.HERE, "torchrun_worker.py")


def test_torchrun_restarts_the_group_after_a_killed_worker(tmp_path):
    env = launch.base_env(2, 1)
    for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        env.pop(k)  # torchrun's agent sets them for each attempt
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           "--nproc-per-node=2", "--max-restarts=1", "--monitor-interval=0.1", WORKER,
           str(tmp_path)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=launch.RUN_TIMEOUT_S)
    out = f"rc={p.returncode}\n{p.stdout[-8000:]}\n{p.stderr[-12000:]}"
    assert p.returncode == 0, out
    # Rank 1 died in the first attempt (restart count 0), so torchrun restarted once.
    assert (tmp_path / "killed").read_text() == "0", out
    for rank in range(2):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert r["restart_count"] == 1, (r, out)
        assert r["world"] == 2 and "nezha" in r["backend"], r
        assert r["exact"] == [True] * 5, (r, out)


def test_each_attempt_keeps_its_store_keys_apart(monkeypatch):
    # torchrun's agent store outlives an attempt: the keys a killed attempt published must not
    # be what the next attempt reads (nezha/torch/__init__.py, RESTART_COUNT_ENV).
    import torch.distributed as dist
    import nezha.torch as nt

    raw = dist.HashStore()
    monkeypatch.setenv(nt.RESTART_COUNT_ENV, "2")
    nt._attempt_store(raw).set("nezha/p2p/1", "127.0.0.1:9")
    assert raw.get("nezha/attempt_2/nezha/p2p/1") == b"127.0.0.1:9"
    assert not raw.check(["nezha/p2p/1"])

    monkeypatch.delenv(nt.RESTART_COUNT_ENV)
    assert nt._attempt_store(raw) is raw  # no elastic agent: the group's store as torch gives it

    for bad in ("two", "-1", "\u00b2", ""):  # "²" is a digit to str.isdigit, not to int()
        monkeypatch.setenv(nt.RESTART_COUNT_ENV, bad)
        try:
            nt._attempt_store(raw)
        except ValueError as e:
            assert nt.RESTART_COUNT_ENV in str(e), e
        else:
            raise AssertionError(f"restart count {bad!r} was accepted")
