"""One rank of the TaLB benchmark (started by bench/run_talb_bench.py in a test-bed namespace
with the pinned torch venv's python): DDP on a communication-bound MLP with one gradient
bucket per layer, the nezha backend, and a comm hook that times each bucket's allreduce.

  talb_worker.py STEPS WARMUP WIDTH LAYERS BATCH

Steps alternate (the same on every rank): even steps give each bucket's allreduce priority
bucket.index() (nezha.torch.allreduce_with_priority, what nezha.torch.priority_hook does),
odd steps issue the same allreduces without a priority (issue order, as DDP's default hook).
Measured per step: seconds from the start of backward until the bucket holding the first
layer's parameters (the one the next forward pass needs first) is reduced, and the step time.
Prints one `REPORT {json}` line."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import nezha.torch


def main() -> None:
    steps, warmup, width, layers, batch = map(int, sys.argv[1:6])
    torch.set_num_threads(1)
    dist.init_process_group("nezha", init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width, bias=False), nn.ReLU()]
    net = nn.Sequential(*mods[:-1])
    first = {id(p) for p in net[0].parameters()}
    layer_mb = width * width * 4 / 2**20
    # One bucket per layer: DDP closes a bucket once it reaches the cap, so a cap just below one
    # layer's gradients (one tensor: no bias) holds exactly one. Backward then issues `layers`
    # allreduces in reverse layer order and several wait in the queue.
    model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=layer_mb * 0.99)
    state = {"prio": False, "done": {}, "first_bucket": None}

    def hook(_, bucket):
        t = bucket.buffer()
        t.div_(world)
        idx = bucket.index()
        if any(id(p) in first for p in bucket.parameters()):
            state["first_bucket"] = idx
        if state["prio"]:
            fut = nezha.torch.allreduce_with_priority(t, idx).get_future()
        else:
            fut = dist.all_reduce(t, async_op=True).get_future()

        def done(f):
            state["done"][idx] = time.perf_counter()
            return f.value()[0]
        return fut.then(done)

    model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank)
    rows = {"prio": [], "fifo": []}
    buckets = 0
    for step in range(warmup + steps):
        x = torch.randn(batch, width, generator=gen)
        y = torch.randn(batch, width, generator=gen)
        if step == warmup:
            dist.barrier()
        state["prio"] = step % 2 == 0
        state["done"].clear()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        tb = time.perf_counter()
        loss.backward()  # returns once every bucket is reduced
        opt.step()
        t1 = time.perf_counter()
        if step >= warmup:
            buckets = len(state["done"])
            rows["prio" if state["prio"] else "fifo"].append(
                {"first_needed_s": state["done"][state["first_bucket"]] - tb,
                 "last_bucket_s": max(state["done"].values()) - tb, "step_s": t1 - t0})
    print("REPORT " + json.dumps({"rank": rank, "rows": rows, "buckets": buckets,
                                  "first_bucket": state["first_bucket"], "last_loss": float(loss),
                                  "grad_bytes": sum(p.numel() for p in net.parameters()) * 4}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
