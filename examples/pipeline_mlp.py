#!/usr/bin/env python3
"""Pipeline-parallel training over torch.distributed send/recv: an MLP cut into one stage per
rank, GPipe schedule (all micro-batches forward, then all backward).

    torchrun --nproc-per-node 2 examples/pipeline_mlp.py --backend nezha --steps 20

Stage s receives micro-batch m's activations from stage s-1 (tag m), sends its output to stage
s+1, and in the backward pass receives the output gradient from s+1 (tag 1000+m) and sends its
input gradient to s-1. The last stage broadcasts the step's loss so every rank prints the same
`LOSSES [...]`. `reference(...)` trains the unsplit model in one process with the same
micro-batches: the pipeline must reproduce its losses (tests compare them).
"""
import argparse
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

IN, HIDDEN, CLASSES = 32, 64, 10
GRAD_TAG = 1000


def blocks():
    """The full model as 4 blocks (same initial weights on every rank: fixed seed)."""
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU()),
            nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),
            nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),
            nn.Linear(HIDDEN, CLASSES)]


def stage_blocks(stage, stages):
    bs = blocks()
    if not 1 <= stages <= len(bs):
        raise ValueError(f"{stages} stages: want 1-{len(bs)}")
    per = [len(bs) // stages + (1 if i < len(bs) % stages else 0) for i in range(stages)]
    start = sum(per[:stage])
    return nn.Sequential(*bs[start:start + per[stage]])


def batch(step, size, seed=99):
    g = torch.Generator().manual_seed(seed + step)
    x = torch.randn(size, IN, generator=g)
    y = (x[:, :CLASSES].argmax(1) + step) % CLASSES
    return x, y


def train(steps=10, micro=4, micro_size=8, lr=0.05):
    """Trains this rank's stage; returns the loss per step (identical on every rank)."""
    stage, stages = dist.get_rank(), dist.get_world_size()
    model = stage_blocks(stage, stages)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    first, last = stage == 0, stage == stages - 1
    losses = []
    for step in range(steps):
        x_all, y_all = batch(step, micro * micro_size)
        opt.zero_grad()
        inputs, outputs, step_loss = [], [], torch.zeros(())
        for m in range(micro):
            if first:
                x = x_all[m * micro_size:(m + 1) * micro_size]
            else:
                x = torch.empty(micro_size, HIDDEN)
                dist.recv(x, src=stage - 1, tag=m)
                x.requires_grad_()
            y = model(x)
            if last:
                y = F.cross_entropy(y, y_all[m * micro_size:(m + 1) * micro_size]) / micro
                step_loss += y.detach()
            else:
                dist.send(y.detach(), dst=stage + 1, tag=m)
            inputs.append(x)
            outputs.append(y)
        for m in reversed(range(micro)):
            if last:
                outputs[m].backward()
            else:
                g = torch.empty_like(outputs[m])
                dist.recv(g, src=stage + 1, tag=GRAD_TAG + m)
                outputs[m].backward(g)
            if not first:
                dist.send(inputs[m].grad, dst=stage - 1, tag=GRAD_TAG + m)
        opt.step()
        dist.broadcast(step_loss, src=stages - 1)
        losses.append(step_loss.item())
    return losses


def reference(steps=10, micro=4, micro_size=8, lr=0.05):
    """The same training without the pipeline (one process, the whole model)."""
    model = nn.Sequential(*blocks())
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x_all, y_all = batch(step, micro * micro_size)
        opt.zero_grad()
        total = 0.0
        for m in range(micro):
            s = slice(m * micro_size, (m + 1) * micro_size)
            loss = F.cross_entropy(model(x_all[s]), y_all[s]) / micro
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="nezha", help="torch.distributed backend (nezha, gloo)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--micro", type=int, default=4, help="micro-batches per step")
    a = p.parse_args(argv)
    if a.backend == "nezha":
        import nezha.torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(a.backend, timeout=timedelta(seconds=120))
    losses = train(a.steps, a.micro)
    if dist.get_rank() == 0:
        print(f"step {a.steps}: loss {losses[-1]:.4f} (first {losses[0]:.4f})", file=sys.stderr)
        print("LOSSES " + json.dumps(losses), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
