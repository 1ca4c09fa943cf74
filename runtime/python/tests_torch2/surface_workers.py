"""Rank-side scenarios for what torch users reach for beyond plain collectives (workers.py
dispatches here): PREMUL_SUM per dtype, DDP with torch's stock comm hooks against gloo in the
same job, mismatched calls, a peer that never starts an operation, the object collectives,
cpu:nezha, monitored_barrier and torch.distributed.checkpoint. Each prints one `REPORT {json}`
line."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

from workers import DTYPES, init, rank_input, report

HUNG_PEER_TIMEOUT_S = 3
PREMUL_FACTOR = 0.5  # inputs are 1..3: every scaled value and sum is exact in every float type


def scenario_premul_sum():
    """PREMUL_SUM through all_reduce and reduce_scatter_tensor for every dtype: floating types
    give sum(x * factor) exactly; integer types are refused at the call with an error naming
    the dtype, and the group still works."""
    init("nezha")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {}
    for dtype in DTYPES:
        for op_name in ("all_reduce", "reduce_scatter_tensor"):
            n = 70001 if op_name == "all_reduce" else 13
            inp = rank_input(n * (world if op_name == "reduce_scatter_tensor" else 1), dtype,
                             rank, 20)
            want_full = sum((rank_input(inp.numel(), dtype, r, 20).to(torch.float64) * PREMUL_FACTOR)
                            for r in range(world))
            op = dist._make_nccl_premul_sum(PREMUL_FACTOR)
            try:
                if op_name == "all_reduce":
                    got = inp.clone()
                    dist.all_reduce(got, op=op)
                    want = want_full
                else:
                    got = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter_tensor(got, inp, op=op)
                    want = want_full[rank * n:(rank + 1) * n]
                ok = torch.equal(got.to(torch.float64), want)
                results[f"{op_name} {dtype}"] = "exact" if ok else f"wrong {got[:4].tolist()}"
            except (TypeError, RuntimeError) as e:
                results[f"{op_name} {dtype}"] = f"error {e}"
            # Whatever happened, the group still works.
            t = torch.ones(3)
            dist.all_reduce(t)
            assert torch.equal(t, torch.full((3,), float(world))), t
    report(results=results)
    dist.destroy_process_group()


def chained_hook(group, bucket):
    """A user hook that chains two collectives: the average, then (from the first one's
    callback, waited there) a MAX of that average, which every rank already agrees on."""
    world = dist.get_world_size(group)
    fut = dist.all_reduce(bucket.buffer().div_(world), group=group, async_op=True).get_future()

    def second(f):
        avg = f.value()[0]
        dist.all_reduce(avg, op=dist.ReduceOp.MAX, group=group)  # issued and waited in a callback
        return avg
    return fut.then(second)


def make_hook(name, group):
    if name == "allreduce":
        return group, default_hooks.allreduce_hook
    if name == "fp16_compress":
        return group, default_hooks.fp16_compress_hook
    if name == "bf16_compress":
        return group, default_hooks.bf16_compress_hook
    if name.startswith("powerSGD"):
        feedback = name == "powerSGD_error_feedback"
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=1,
                                       use_error_feedback=feedback, warm_start=feedback,
                                       random_seed=7)
        return state, powersgd.powerSGD_hook
    if name == "chained":
        return group, chained_hook
    raise ValueError(name)


HOOKS = ["allreduce", "fp16_compress", "bf16_compress", "powerSGD", "powerSGD_error_feedback",
         "chained"]
HOOK_STEPS = 5  # PowerSGD compresses from step 2 on


def train_with_hook(name, group):
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ddp = DDP(model, process_group=group)
    ddp.register_comm_hook(*make_hook(name, group))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(HOOK_STEPS):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def scenario_ddp_hooks():
    """DDP with each stock comm hook on nezha (default group) and on gloo (a second group):
    losses and parameters compared."""
    init("nezha")
    gloo = dist.new_group(backend="gloo")
    nezha = dist.distributed_c10d._get_default_group()
    out = {}
    for name in HOOKS:
        nez_losses, nez_params = train_with_hook(name, nezha)
        glo_losses, glo_params = train_with_hook(name, gloo)
        out[name] = {
            "losses": nez_losses, "gloo_losses": glo_losses,
            "bitwise": all(torch.equal(a, b) for a, b in zip(nez_params, glo_params)),
            "max_param_diff": max((a - b).abs().max().item()
                                  for a, b in zip(nez_params, glo_params)),
        }
    report(hooks=out)
    dist.destroy_process_group()


def _mismatch_cases(rank):
    """name -> fn(group) issuing this rank's side of a mismatched call."""
    def sizes(g):
        dist.all_reduce(torch.ones(10 if rank == 0 else 20), group=g)

    def dtypes(g):  # equal byte counts: libnezha alone would reduce the bits as one type
        dist.all_reduce(torch.ones(16, dtype=torch.float32 if rank == 0 else torch.int32), group=g)

    def collectives(g):
        t = torch.ones(16)
        if rank == 0:
            dist.all_reduce(t, group=g)
        else:
            dist.broadcast(t, src=0, group=g)

    def ops(g):
        dist.all_reduce(torch.ones(16), op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX,
                        group=g)

    def skipped(g):  # rank 1 skips the first of two collectives
        if rank == 0:
            dist.all_reduce(torch.ones(10), group=g)
        dist.all_reduce(torch.ones(20), group=g)
    return {"sizes": sizes, "dtypes": dtypes, "collectives": collectives, "ops": ops,
            "skipped": skipped}


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def scenario_mismatch():
    """Each mismatch on a fresh nezha group: the error every rank gets, then what the group says
    next. A local argument error leaves its group usable; the default group is never touched."""
    init("nezha")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, fn in _mismatch_cases(rank).items():
        g = dist.new_group(backend="nezha")
        first = _error(lambda: fn(g))
        after = _error(lambda: dist.all_reduce(torch.ones(4), group=g))
        out[name] = {"error": first, "after": after}
        dist.barrier(group=gloo)  # both ranks done with g before it goes
        dist.destroy_process_group(g)
    g = dist.new_group(backend="nezha")
    local = _error(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.float8_e5m2), group=g))
    t = torch.ones(4)
    dist.all_reduce(t, group=g)
    out["local"] = {"error": local, "sum_after": t.tolist()}
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world))), t
    report(cases=out)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def scenario_hung_peer():
    """A group with a 3 s timeout whose rank 1 never issues the collective rank 0 waits in:
    rank 0's error and how long its all_reduce took (the launch sets libnezha's I/O timeout far
    above 3 s, so only the group's timeout can end it that early); then a monitored_barrier
    rank 1 never enters."""
    import time
    from datetime import timedelta
    init("nezha")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    g = dist.new_group(backend="nezha", timeout=timedelta(seconds=HUNG_PEER_TIMEOUT_S))
    error, elapsed = None, None
    if rank == 0:
        start = time.monotonic()
        error = _error(lambda: dist.all_reduce(torch.ones(8), group=g))
        elapsed = time.monotonic() - start
    # monitored_barrier that rank 1 never enters: rank 0 names it (on the default group).
    missing = _error(lambda: dist.monitored_barrier(timeout=timedelta(seconds=1),
                                                    wait_all_ranks=True)) if rank == 0 else None
    dist.barrier(group=gloo)  # rank 1 waits here, never in g's all_reduce
    report(error=error, elapsed_s=elapsed, monitored_barrier=missing)
    dist.destroy_process_group()


def scenario_extras():
    """What torch users also reach for: backend="cpu:nezha", the object collectives,
    monitored_barrier (every rank passes: no error), and every rank's view of
    the group under whatever TORCH_DISTRIBUTED_DEBUG the launch set."""
    from datetime import timedelta
    torch.set_num_threads(1)
    dist.init_process_group("cpu:nezha", init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"backend": str(dist.get_backend())}
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
    out["all_gather_object"] = objs
    lst = [{"from": "root", "n": 3}, "x"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    out["broadcast_object_list"] = lst
    got = [None]
    dist.scatter_object_list(got, [f"to{r}" for r in range(world)] if rank == 0 else None, src=0)
    out["scatter_object_list"] = got[0]
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(("g", rank), gathered, dst=0)
    out["gather_object"] = gathered
    out["monitored_barrier"] = _error(lambda: dist.monitored_barrier(timeout=timedelta(seconds=60)))
    out["monitored_barrier_all"] = _error(
        lambda: dist.monitored_barrier(timeout=timedelta(seconds=60), wait_all_ranks=True))
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    report(**out)
    dist.destroy_process_group()


def scenario_checkpoint(directory):
    """torch.distributed.checkpoint save, then load into a model of zeros: every rank gets the
    saved parameters back (the planner's object collectives and barriers run on nezha)."""
    import torch.distributed.checkpoint as dcp
    init("nezha")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    want = {k: v.clone() for k, v in model.state_dict().items()}
    dcp.save(model.state_dict(), checkpoint_id=directory)
    for p in model.parameters():
        p.data.zero_()
    state = model.state_dict()
    dcp.load(state, checkpoint_id=directory)
    model.load_state_dict(state)
    report(restored=all(torch.equal(model.state_dict()[k], v) for k, v in want.items()),
           files=sorted(os.listdir(directory)))
    dist.destroy_process_group()
