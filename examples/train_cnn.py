#!/usr/bin/env python3
"""A small but real data-parallel training job: a CNN classifying synthetic 32x32 images.

Run it with torchrun (or any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT):

    torchrun --nproc-per-node 2 examples/train_cnn.py --backend nezha --steps 50
    torchrun --nproc-per-node 2 examples/train_cnn.py --backend gloo --mode fsdp

The data is generated from a fixed seed (a mixture of class templates plus noise), so two runs
with the same arguments see the same batches and a run with `nezha` can be compared loss for
loss with a run with `gloo`. Each rank trains on its own shard of every global batch. Prints one
`LOSSES [...]` line (rank 0's loss per step) at the end; importable (`train(...)`) by tests.
"""
import argparse
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 10


class SmallCNN(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.conv3 = nn.Conv2d(2 * width, 4 * width, 3, padding=1)
        self.fc1 = nn.Linear(4 * width * 4 * 4, 128)
        self.fc2 = nn.Linear(128, CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def synthetic_batch(step, batch, seed=1234):
    """The global batch of `step`: images = class template + noise, identical on every rank."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 3, 32, 32, generator=g)
    g.manual_seed(seed + 1 + step)
    labels = torch.randint(0, CLASSES, (batch,), generator=g)
    images = templates[labels] + 0.8 * torch.randn(batch, 3, 32, 32, generator=g)
    return images, labels


def wrap(model, mode):
    if mode in ("ddp", "ddp-priority"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        # Small buckets: several allreduces in flight per step, overlapping backward.
        ddp = DDP(model, bucket_cap_mb=0.25)
        if mode == "ddp-priority":  # nezha only: the bucket needed first is reduced first
            import nezha.torch
            ddp.register_comm_hook(None, nezha.torch.priority_hook)
        return ddp
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in (model.conv1, model.conv2, model.conv3, model.fc1, model.fc2):
            fully_shard(layer)
        return fully_shard(model)
    raise ValueError(f"--mode {mode!r}: want ddp, ddp-priority or fsdp")


def train(steps=20, batch=32, mode="ddp", lr=0.05, on_step=None):
    """Trains in the current process group; returns rank-averaged losses per step (all ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if batch % world:
        raise ValueError(f"--batch {batch} is not divisible by world size {world}")
    torch.manual_seed(0)
    model = wrap(SmallCNN(), mode)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    shard = batch // world
    for step in range(steps):
        if on_step:
            on_step(step)
        images, labels = synthetic_batch(step, batch)
        x, y = images[rank * shard:(rank + 1) * shard], labels[rank * shard:(rank + 1) * shard]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        losses.append(avg.item() / world)
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="nezha", help="torch.distributed backend (nezha, gloo)")
    p.add_argument("--mode", default="ddp", choices=["ddp", "ddp-priority", "fsdp"],
                   help="ddp-priority: DDP with nezha.torch.priority_hook (backend nezha only)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args(argv)
    if a.backend == "nezha":
        import nezha.torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(a.backend, timeout=timedelta(seconds=120))
    losses = train(a.steps, a.batch, a.mode, a.lr)
    if dist.get_rank() == 0:
        print(f"step {a.steps}: loss {losses[-1]:.4f} (first {losses[0]:.4f})", file=sys.stderr)
        print("LOSSES " + json.dumps(losses), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
