"""The script torchrun runs in test_torch2_torchrun.py: a nezha job whose rank 1 kills itself
once, in the first attempt, after the group's first collective (a marker file in OUT_DIR says
it already did). torchrun --max-restarts then starts every worker again; the new attempt builds
a fresh nezha process group from torchrun's new environment and must finish with exact sums.
Each rank of the attempt that finishes writes OUT_DIR/rank{R}.json."""
import json
import os
import signal
import sys

import torch
import torch.distributed as dist

import nezha.torch  # noqa: F401  registers the "nezha" backend

STEPS = 5
N = 70001  # above the cold threshold: split across the rails


def expected_sum(world, step):
    # Every rank contributes arange(N) * (rank + 1) + step; exact in float32 (< 2^24).
    return torch.arange(N, dtype=torch.float32) * (world * (world + 1) // 2) + world * step


def main(out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("nezha")  # rank, world size, MASTER_* from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(4)
    dist.all_reduce(t)
    marker = os.path.join(out_dir, "killed")
    if rank == 1 and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(os.environ["TORCHELASTIC_RESTART_COUNT"])
        os.kill(os.getpid(), signal.SIGKILL)  # a crash: no cleanup, sockets reset by the kernel
    exact = []
    for step in range(STEPS):
        t = torch.arange(N, dtype=torch.float32) * (rank + 1) + step
        dist.all_reduce(t)
        exact.append(torch.equal(t, expected_sum(world, step)))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
                   "world": world, "exact": exact, "backend": str(dist.get_backend())}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
