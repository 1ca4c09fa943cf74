"""Rank-side scenarios started by nezha_launch.py: `nezha_workers.py SCENARIO`, rank in RANK, world in WORLD_SIZE.

Each prints one `REPORT {json}` line; any exception exits non-zero with its traceback.
"""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX}
# 1 element, odd, and above the cold threshold (so hot start splits it across both rails).
SIZES = [1, 13, 70001]


def report(**fields):
    print("REPORT " + json.dumps(fields), flush=True)


def init(backend):
    import nezha.torch_backend  # noqa: F401  registers "nezha"
    dist.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=60))


def rank_input(n, dtype, rank, salt):
    """Small integers 1..3, different per rank and element: sums/products of up to 4 ranks are
    exact in every dtype (fp16/bf16 included), so both backends must agree bit for bit."""
    base = torch.arange(n, dtype=torch.int64) * (rank + 2) + rank * 7 + salt
    return (base % 3 + 1).to(dtype)


# gloo in torch 1.13 rejects bfloat16 ("Invalid scalar type"): those cases are checked against
# references computed locally from every rank's (deterministic) input instead.
GLOO_LACKS = {torch.bfloat16}


def gloo_reference(group, dtype, fn):
    """fn(group) run on gloo, or None when gloo lacks the dtype."""
    return None if dtype in GLOO_LACKS else fn(group)


def scenario_collectives():
    """Every collective x dtype (x op) through backend nezha, compared with gloo in the same job."""
    init("nezha")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    checked, local_refs = 0, []

    def expect_equal(got, want, what):
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: nezha {got.flatten()[:8]} != reference {want.flatten()[:8]}")

    def local_reduce(tensors, op):
        acc = torch.stack([t.double() for t in tensors])
        return {"sum": acc.sum(0), "product": acc.prod(0), "min": acc.min(0).values,
                "max": acc.max(0).values}[op]

    for dtype in DTYPES:
        for n in SIZES:
            all_inputs = [rank_input(n, dtype, r, 0) for r in range(world)]
            for opname, op in OPS.items():
                what = f"allreduce {dtype} n={n} {opname}"
                t = rank_input(n, dtype, rank, 0)
                dist.all_reduce(t, op=op)
                ref = gloo_reference(gloo, dtype, lambda g: _ar(rank_input(n, dtype, rank, 0), op, g))
                if ref is None:
                    ref = local_reduce(all_inputs, opname).to(dtype)
                    local_refs.append(what)
                expect_equal(t, ref, what)
                checked += 1

                what = f"reduce_scatter {dtype} n={n} {opname}"
                blocks = [rank_input(n, dtype, rank, b) for b in range(world)]
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, [b.clone() for b in blocks], op=op)
                want = local_reduce([rank_input(n, dtype, r, rank) for r in range(world)], opname).to(dtype)
                gref = gloo_reference(gloo, dtype, lambda g: _rs(n, dtype, blocks, op, g))
                if gref is not None:
                    expect_equal(gref, want, what + " (gloo vs local)")
                else:
                    local_refs.append(what)
                expect_equal(out, want, what)
                checked += 1

            for root in range(world):
                what = f"broadcast {dtype} n={n} root={root}"
                t = rank_input(n, dtype, rank, 5)
                dist.broadcast(t, src=root)
                ref = gloo_reference(gloo, dtype, lambda g: _bc(rank_input(n, dtype, rank, 5), root, g))
                if ref is not None:
                    expect_equal(t, ref, what)
                expect_equal(t, rank_input(n, dtype, root, 5), what + " (root's data)")
                checked += 1

            what = f"allgather {dtype} n={n}"
            mine = rank_input(n, dtype, rank, 9)
            outs = [torch.zeros(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, mine)
            refs = gloo_reference(gloo, dtype, lambda g: _ag(mine, world, g))
            for r in range(world):
                if refs is not None:
                    expect_equal(outs[r], refs[r], f"{what} block {r}")
                expect_equal(outs[r], rank_input(n, dtype, r, 9), f"{what} block {r} (rank's data)")
            flat = torch.zeros(world * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine)
            expect_equal(flat, torch.cat([rank_input(n, dtype, r, 9) for r in range(world)]), what + " into_tensor")
            checked += 1
    dist.barrier()

    errors = {}
    for label, call in [("avg", lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.AVG)),
                        ("int16", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16))),
                        ("uint8", lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint8))),
                        ("noncontig", lambda: dist.all_reduce(torch.ones(4, 4).t())),
                        ("reduce", lambda: dist.reduce(torch.ones(4), dst=0))]:
        try:
            call()
            errors[label] = None
        except Exception as e:  # the type and message are what the test checks
            errors[label] = f"{type(e).__name__}: {e}"
    # The communicator still works after rejected calls (they never reached the wire).
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [world] * 3, t
    report(checked=checked, local_refs=local_refs, errors=errors)
    dist.destroy_process_group()


def _ar(t, op, group):
    dist.all_reduce(t, op=op, group=group)
    return t


def _bc(t, root, group):
    dist.broadcast(t, src=root, group=group)
    return t


def _ag(mine, world, group):
    refs = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(refs, mine, group=group)
    return refs


def _rs(n, dtype, blocks, op, group):
    # gloo in torch 1.13 has no reduce_scatter; its allreduce of every block, then our block, is
    # the same result.
    out = None
    for b in range(len(blocks)):
        t = blocks[b].clone()
        dist.all_reduce(t, op=op, group=group)
        if b == dist.get_rank():
            out = t
    return out


def scenario_ddp():
    """A few DDP steps on a tiny MLP; reports the final parameters for comparison across backends."""
    init(os.environ["BACKEND"])
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)  # different init per rank: DDP's broadcast must align them
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)
    for _ in range(5):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    params = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    report(params=params.tolist())
    dist.destroy_process_group()


def scenario_init_only():
    """Initializes backend nezha and reports the exception (type, message) if any."""
    try:
        init("nezha")
        t = torch.ones(2)
        dist.all_reduce(t)
        report(error=None, value=t.tolist())
    except Exception as e:
        report(error=type(e).__name__, message=str(e))


def scenario_rail_traffic():
    """Large allreduces (hot start, split across rails) for the test-bed rail counter test."""
    init("nezha")
    world = dist.get_world_size()
    n = int(os.environ.get("ELEMENTS", 4 << 20))
    for i in range(int(os.environ.get("ITERS", 10))):
        t = torch.full((n,), float(dist.get_rank() + i))
        dist.all_reduce(t)
        want = float(sum(r + i for r in range(world)))
        assert torch.all(t == want), (i, t[:4])
    report(bytes=n * 4, iters=int(os.environ.get("ITERS", 10)))
    dist.destroy_process_group()


def scenario_rail_cut():
    """Allreduces before and after the test cuts a rail (CUT_REQUEST/CUT_DONE files handshake at
    iteration CUT_AT on rank 0); reports how many results were correct or the error."""
    import time
    init("nezha")
    rank, world = dist.get_rank(), dist.get_world_size()
    n, iters, cut_at = int(os.environ["ELEMENTS"]), int(os.environ["ITERS"]), int(os.environ["CUT_AT"])
    correct = 0
    try:
        for i in range(iters):
            if i == cut_at and rank == 0:
                open(os.environ["CUT_REQUEST"], "w").close()
                while not os.path.exists(os.environ["CUT_DONE"]):
                    time.sleep(0.05)
            t = torch.full((n,), float(rank + i))
            dist.all_reduce(t)
            if torch.all(t == float(sum(r + i for r in range(world)))):
                correct += 1
        report(correct=correct, error=None)
    except Exception as e:
        report(correct=correct, error=type(e).__name__, message=str(e))


def scenario_numpy():
    """The plain binding (no torch.distributed): numpy buffers, in place and out of place."""
    import numpy as np
    import nezha
    with nezha.Communicator() as comm:
        rank, world = comm.rank, comm.world_size
        a = np.arange(100003, dtype=np.float64) + rank
        out = np.empty_like(a)
        comm.allreduce(a, out, op="sum")
        assert np.array_equal(out, np.arange(100003) * world + sum(range(world))), out[:4]
        comm.allreduce(a, op=nezha.ReduceOp.MAX)  # in place
        assert np.array_equal(a, np.arange(100003) + world - 1)
        g = np.empty(world * 5, dtype=np.int32)
        comm.allgather(np.full(5, rank, dtype=np.int32), g)
        assert g.tolist() == [r for r in range(world) for _ in range(5)], g
        rs = np.empty(3, dtype=np.float32)
        comm.reduce_scatter(np.arange(3 * world, dtype=np.float32), rs, op="min")
        assert rs.tolist() == list(range(3 * rank, 3 * rank + 3)), rs
        b = np.full(7, rank, dtype=np.int64)
        comm.broadcast(b, root=world - 1)
        assert b.tolist() == [world - 1] * 7
        comm.barrier()
        table = os.environ.get("TABLE_OUT")
        if table and rank == 0:
            comm.save_table(table)
        report(rank=rank, world=world)


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]]()
