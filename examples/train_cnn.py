#!/usr/bin/env python3
"""A small but real data-parallel training job: a CNN classifying synthetic 32x32 images.

Run it with torchrun (or any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT):

    torchrun --nproc-per-node 2 examples/train_cnn.py --backend nezha --steps 50
    torchrun --nproc-per-node 2 examples/train_cnn.py --backend gloo --mode fsdp

or as a MultiRailJob worker's command, with no launcher: the operator gives each worker
NEZHA_RANK, NEZHA_WORLD_SIZE and NEZHA_RENDEZVOUS (rank 0's host:port); without RANK the script
takes rank and world size from those, MASTER_ADDR from the rendezvous host and MASTER_PORT = its
port - 1 (torch's store next to Nezha's rendezvous, which the backend derives as MASTER_PORT + 1).
`--seconds S` trains until rank 0 has trained S seconds (every rank stops at the same step).

The data is generated from a fixed seed (a mixture of class templates plus noise), so two runs
with the same arguments see the same batches and a run with `nezha` can be compared loss for
loss with a run with `gloo`. Each rank trains on its own shard of every global batch. Prints one
`LOSSES [...]` line (rank 0's loss per step) at the end, and every rank one
`FINAL {"rank", "steps", "loss", "params"}` line: the last rank-averaged loss and a SHA-256 of its
model's parameters (DDP; the replicas must be bit-identical). Importable (`train(...)`) by tests.
"""
import argparse
import hashlib
import json
import os
import sys
import time
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


def train(steps=20, batch=32, mode="ddp", lr=0.05, on_step=None, seconds=None, log_every=0,
          result=None, clip_grad=None):
    """Trains in the current process group; returns rank-averaged losses per step (all ranks).

    steps = 0 with `seconds`: no step limit. `seconds`: stop once rank 0 has trained that long
    (its flag rides in the loss allreduce, so every rank stops after the same step). `result`,
    a dict, receives the trained model under "model". `clip_grad`: clip the gradient norm (long
    runs: without it, lr 0.05 reaches a loss near 0 and then diverges within a few hundred steps)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if batch % world:
        raise ValueError(f"--batch {batch} is not divisible by world size {world}")
    if steps <= 0 and not seconds:
        raise ValueError("--steps 0 needs --seconds")
    torch.manual_seed(0)
    model = wrap(SmallCNN(), mode)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    shard = batch // world
    started = time.monotonic()
    step = 0
    while steps <= 0 or step < steps:
        if on_step:
            on_step(step)
        images, labels = synthetic_batch(step, batch)
        x, y = images[rank * shard:(rank + 1) * shard], labels[rank * shard:(rank + 1) * shard]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if clip_grad:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        opt.step()
        stop = 1.0 if seconds and rank == 0 and time.monotonic() - started >= seconds else 0.0
        avg = torch.stack([loss.detach(), torch.tensor(stop)])
        dist.all_reduce(avg)
        losses.append(avg[0].item() / world)
        step += 1
        if log_every and rank == 0 and step % log_every == 0:
            rate = step / max(time.monotonic() - started, 1e-9)
            print(f"step {step}: loss {losses[-1]:.4f} ({rate:.1f} steps/s)", file=sys.stderr, flush=True)
        if avg[1].item() > 0:
            break
    if result is not None:
        result["model"] = model
    return losses


def params_digest(model):
    """SHA-256 of the parameters' bytes in order (DDP replicas are bit-identical)."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def torch_env_from_nezha(env=None):
    """RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from the operator's NEZHA_* when no launcher set
    them (a MultiRailJob worker). Returns what it set."""
    env = os.environ if env is None else env
    if env.get("RANK") or not env.get("NEZHA_RANK"):
        return {}
    host, _, port = env.get("NEZHA_RENDEZVOUS", "").rpartition(":")
    if not host or not port.isdigit() or not 1 < int(port) <= 65535:
        raise SystemExit(f"NEZHA_RENDEZVOUS={env.get('NEZHA_RENDEZVOUS', '')!r}: want host:port "
                         "(needed for MASTER_ADDR/MASTER_PORT when RANK is unset)")
    out = {"RANK": env["NEZHA_RANK"], "WORLD_SIZE": env.get("NEZHA_WORLD_SIZE", "1"),
           "MASTER_ADDR": host, "MASTER_PORT": str(int(port) - 1)}
    env.update(out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="nezha", help="torch.distributed backend (nezha, gloo)")
    p.add_argument("--mode", default="ddp", choices=["ddp", "ddp-priority", "fsdp"],
                   help="ddp-priority: DDP with nezha.torch.priority_hook (backend nezha only)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seconds", type=float, default=None,
                   help="train until rank 0 has trained this long (with --steps 0: no step limit)")
    p.add_argument("--log-every", type=int, default=0, help="rank 0 prints its loss every N steps")
    p.add_argument("--clip-grad", type=float, default=None, help="clip the gradient norm (long runs)")
    a = p.parse_args(argv)
    torch_env_from_nezha()
    if a.backend == "nezha":
        import nezha.torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(a.backend, timeout=timedelta(seconds=120))
    result = {}
    losses = train(a.steps, a.batch, a.mode, a.lr, seconds=a.seconds, log_every=a.log_every,
                   result=result, clip_grad=a.clip_grad)
    rank = dist.get_rank()
    if rank == 0:
        print(f"step {len(losses)}: loss {losses[-1]:.4f} (first {losses[0]:.4f})", file=sys.stderr)
        print("LOSSES " + json.dumps(losses), flush=True)
    digest = params_digest(result["model"]) if a.mode == "ddp" else None
    print("FINAL " + json.dumps({"rank": rank, "steps": len(losses), "loss": losses[-1],
                                 "params": digest}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
