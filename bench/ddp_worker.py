"""One rank of the DDP step-time benchmark (started by bench/run_ddp_bench.py in a test-bed
namespace with the pinned torch venv's python): a communication-bound wide MLP trained with DDP.

  ddp_worker.py BACKEND STEPS WARMUP WIDTH LAYERS BATCH

Rank and world from RANK/WORLD_SIZE, rendezvous from MASTER_ADDR/MASTER_PORT (torch's env://).
Prints one `REPORT {json}` line: per-step seconds of the timed steps and the last loss."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    backend, steps, warmup, width, layers, batch = sys.argv[1], *map(int, sys.argv[2:7])
    if backend == "nezha":
        import nezha.torch  # noqa: F401  registers backend "nezha"
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)  # same initial weights on every rank and every backend
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*mods[:-1]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank)
    times, loss = [], None
    for step in range(warmup + steps):
        x = torch.randn(batch, width, generator=gen)
        y = torch.randn(batch, width, generator=gen)
        if step == warmup:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # returns once DDP's gradient allreduces are done
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    params = sum(p.numel() for p in model.parameters())
    print("REPORT " + json.dumps({"rank": rank, "backend": backend, "step_s": times,
                                  "last_loss": float(loss), "grad_bytes": params * 4}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
