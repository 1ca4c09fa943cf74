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
