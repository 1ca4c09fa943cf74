"""One rank of hack/gpu-check.sh's one-node proof: torch.distributed `nccl` all_reduce on CUDA
tensors, every result checked exactly, timed for bus bandwidth, or looped while a rail is cut.

Each of the two ranks runs in its own test-bed host namespace with NCCL_HOSTID of its own, so
NCCL takes them for two hosts and moves the data through the net plugin (docs/nccl.md,
"One-GPU proof"). Writes a JSON result; exit 0 iff every all_reduce was exact.

  gpu-allreduce.py --mode bench|loop --bytes N --iters N --out FILE [--seconds S] [--ready FILE]
                   [--cpu]

Rendezvous: MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE (torch's env:// init).
"""

import argparse
import json
import os
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("bench", "loop"), required=True)
    p.add_argument("--bytes", type=int, required=True, help="bytes per all_reduce (float32)")
    p.add_argument("--iters", type=int, required=True, help="timed all_reduces (bench)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0, help="loop: run this long")
    p.add_argument("--ready", default="", help="loop: created after the first ops completed")
    p.add_argument("--out", required=True)
    p.add_argument("--cpu", action="store_true",
                   help="gloo on CPU tensors: checks this program itself on a machine without a GPU")
    return p.parse_args()


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo" if args.cpu else "nccl", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cpu") if args.cpu else torch.device("cuda", 0)
    if not args.cpu:
        torch.cuda.set_device(dev)
    sync = (lambda: None) if args.cpu else (lambda: torch.cuda.synchronize(dev))
    count = max(1, args.bytes // 4)
    # Integers below 2^24 in float32: every sum is exact, so results compare with ==.
    pattern = torch.arange(count, device=dev, dtype=torch.int64).remainder_(1000).to(torch.float32)
    mine = pattern * (rank + 1)
    want = pattern * (world * (world + 1) // 2)
    buf = torch.empty_like(mine)
    result = {"rank": rank, "world": world, "bytes": count * 4, "torch": torch.__version__,
              "cuda": torch.version.cuda, "backend": dist.get_backend(), "wrong": 0, "ops": 0,
              "op_ms": []}
    if not args.cpu:
        result.update(nccl=".".join(map(str, torch.cuda.nccl.version())),
                      device=torch.cuda.get_device_name(dev))

    def one_op():
        buf.copy_(mine)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        t1 = time.perf_counter()
        result["ops"] += 1
        if not torch.equal(buf, want):
            result["wrong"] += 1
        return t0, t1

    for _ in range(args.warmup):
        one_op()
    if args.mode == "bench":
        total = 0.0
        for _ in range(args.iters):
            t0, t1 = one_op()
            total += t1 - t0
        algbw = count * 4 * args.iters / total / 1e9
        # nccl-tests' definition: an allreduce moves 2(n-1)/n of the buffer per rank.
        result.update(seconds=total, algbw_gbs=algbw, busbw_gbs=algbw * 2 * (world - 1) / world)
    else:
        end = time.perf_counter() + args.seconds
        go = torch.ones(1, device=dev)
        while True:
            # Both ranks stop after the same op: each votes, the minimum decides.
            go.fill_(1.0 if time.perf_counter() < end else 0.0)
            dist.all_reduce(go, op=dist.ReduceOp.MIN)
            if go.item() == 0:
                break
            t0, t1 = one_op()
            result["op_ms"].append([time.time(), (t1 - t0) * 1e3])
            if args.ready and result["ops"] == args.warmup + 5:
                open(args.ready, "w").close()
        result["max_op_ms"] = max((d for _, d in result["op_ms"]), default=0)
    dist.barrier()
    dist.destroy_process_group()
    result["check"] = "ok" if result["wrong"] == 0 and result["ops"] > 0 else "wrong"
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0 if result["check"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
