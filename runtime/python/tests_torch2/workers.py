"""Rank-side scenarios started by launch.py: `workers.py SCENARIO [args]`, rank in RANK, world
in WORLD_SIZE. Each prints one `REPORT {json}` line; any exception exits non-zero."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import nezha.torch  # noqa: F401  registers backend "nezha"

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.int8, torch.uint8]
# 1 element, odd, and above the cold threshold (so hot start splits it across the rails).
SIZES = [1, 13, 70001]


def report(**fields):
    print("REPORT " + json.dumps(fields), flush=True)


def init(backend):
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=120))


def rank_input(n, dtype, rank, salt):
    """Small integers 1..3 per rank and element: sums/products of up to 4 ranks are exact in
    every dtype (fp16/bf16/int8 included), so nezha and gloo must agree bit for bit."""
    base = torch.arange(n, dtype=torch.int64) * (rank + 2) + rank * 7 + salt
    return (base % 3 + 1).to(dtype)


def scenario_collectives():
    """Every collective x dtype (x op) on nezha (default group) and gloo (a second group) with
    the same inputs; results compared exactly."""
    init("nezha")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    checked = 0
    skipped = []

    def same(got, want, what):
        nonlocal checked
        if isinstance(got, (list, tuple)):
            for i, (g, w) in enumerate(zip(got, want)):
                same(g, w, f"{what}[{i}]")
            return
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: nezha {got.flatten()[:8]} != gloo {want.flatten()[:8]}")
        checked += 1

    def both(what, fn):
        """fn(group) -> tensor(s); runs on nezha and gloo, compares. Dtypes/ops gloo lacks are
        recorded, not compared."""
        try:
            want = fn(gloo)
        except (RuntimeError, ValueError) as e:
            skipped.append(f"{what}: gloo: {str(e).splitlines()[0][:80]}")
            fn(None)  # nezha still runs it (same op order on every rank)
            return
        same(fn(None), want, what)

    for dtype in DTYPES:
        for n in SIZES:
            tag = f"{dtype}/{n}"
            for name, op in [("sum", dist.ReduceOp.SUM), ("product", dist.ReduceOp.PRODUCT),
                             ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX)]:
                def ar(g, op=op):
                    t = rank_input(n, dtype, rank, 1)
                    dist.all_reduce(t, op=op, group=g)
                    return t
                both(f"allreduce {name} {tag}", ar)
            if dtype.is_floating_point:
                t = rank_input(n, dtype, rank, 2)
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
                want = rank_input(n, dtype, rank, 2)
                dist.all_reduce(want, group=gloo)
                same(t, want / world, f"allreduce avg {tag}")
            for root in range(world):
                def bc(g, root=root):
                    t = rank_input(n, dtype, rank, 3)
                    dist.broadcast(t, src=root, group=g)
                    return t
                both(f"broadcast root {root} {tag}", bc)

                def red(g, root=root):
                    t = rank_input(n, dtype, rank, 4)
                    dist.reduce(t, dst=root, group=g)
                    return t if rank == root else torch.zeros(0)
                both(f"reduce root {root} {tag}", red)

                def gat(g, root=root):
                    t = rank_input(n, dtype, rank, 5)
                    outs = [torch.empty_like(t) for _ in range(world)] if rank == root else None
                    dist.gather(t, outs, dst=root, group=g)
                    return outs if rank == root else []
                both(f"gather root {root} {tag}", gat)

                def sca(g, root=root):
                    out = torch.empty(n, dtype=dtype)
                    ins = [rank_input(n, dtype, r, 6) for r in range(world)] if rank == root else None
                    dist.scatter(out, ins, src=root, group=g)
                    return out
                both(f"scatter root {root} {tag}", sca)

            def ag(g):
                t = rank_input(n, dtype, rank, 7)
                outs = [torch.empty_like(t) for _ in range(world)]
                dist.all_gather(outs, t, group=g)
                return outs
            both(f"all_gather {tag}", ag)

            def agt(g):
                t = rank_input(n, dtype, rank, 8)
                out = torch.empty(world * n, dtype=dtype)
                dist.all_gather_into_tensor(out, t, group=g)
                return out
            both(f"all_gather_into_tensor {tag}", agt)

            if dtype != torch.bool:
                def rs(g):
                    ins = [rank_input(n, dtype, rank, 9 + r) for r in range(world)]
                    out = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter(out, ins, group=g)
                    return out
                both(f"reduce_scatter {tag}", rs)

                def rst(g):
                    inp = rank_input(world * n, dtype, rank, 10)
                    out = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter_tensor(out, inp, group=g)
                    return out
                both(f"reduce_scatter_tensor {tag}", rst)

            # Uneven splits: rank r sends (r + p + 1) * n rows... kept small, to rank p; some 0.
            def splits(src, dst):
                return 0 if (src + dst) % 3 == 2 else (src + 2 * dst) % 4 + n % 5
            ins_split = [splits(rank, p) for p in range(world)]
            outs_split = [splits(p, rank) for p in range(world)]

            def a2a(g):
                inp = rank_input(sum(ins_split) * 2, dtype, rank, 11).view(-1, 2)
                out = torch.empty(sum(outs_split), 2, dtype=dtype)
                dist.all_to_all_single(out, inp, outs_split, ins_split, group=g)
                return out
            both(f"all_to_all_single uneven {tag}", a2a)

            def a2al(g):
                ins = [rank_input(splits(rank, p) + 1, dtype, rank, 12 + p) for p in range(world)]
                outs = [torch.empty(splits(p, rank) + 1, dtype=dtype) for p in range(world)]
                dist.all_to_all(outs, ins, group=g)
                return outs
            both(f"all_to_all list {tag}", a2al)
    dist.barrier()
    # Several operations in flight at once, waited on out of order: ops run in issue order.
    ts = [torch.full((1000 * (i + 1),), float(rank + i)) for i in range(6)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for i in reversed(range(6)):
        works[i].wait()
        want = float(sum(r + i for r in range(world)))
        assert torch.all(ts[i] == want), (i, ts[i][:4], want)
    # Futures complete with the output tensors (what DDP's comm hooks chain on).
    t = torch.ones(10)
    fut = dist.all_reduce(t, async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.full((10,), float(world)))
    # Errors: a dtype error raises at the call, a mismatch found by the runtime on wait(); the
    # group still works afterwards.
    errors = {}
    try:
        dist.all_reduce(torch.zeros(3, dtype=torch.complex64))
    except Exception as e:  # noqa: BLE001
        errors["complex"] = str(e)
    bad_out = [1] * world
    bad_out[0] = 1 + (rank == 0)  # rank 0 expects one row too many from rank 0... and itself
    try:
        w = dist.all_to_all_single(torch.empty(sum(bad_out)), torch.ones(world), bad_out,
                                   [1] * world, async_op=True)
        w.wait()
    except Exception as e:  # noqa: BLE001
        errors["mismatch"] = str(e)
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world)))
    report(checked=checked, skipped=skipped, errors=errors)
    dist.destroy_process_group()


def scenario_train(backend, mode, steps, cut_step=-1):
    """Trains examples/train_cnn.py's model; cut_step >= 0: rank 0 breaks rail r1 there."""
    import train_cnn
    init(backend)
    on_step = None
    failovers = 0
    if cut_step >= 0:
        be = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))

        def on_step(step):
            if step == cut_step and dist.get_rank() == 0:
                be.abort_rail(1)
    losses = train_cnn.train(steps=int(steps), mode=mode, on_step=on_step)
    if cut_step >= 0:
        dist.barrier()
        failovers = be.failover_count()
    report(losses=losses, failovers=failovers)
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario, *args = sys.argv[1:]
    if scenario == "collectives":
        scenario_collectives()
    elif scenario == "train":
        backend, mode, steps, *rest = args
        scenario_train(backend, mode, steps, int(rest[0]) if rest else -1)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
