"""torch.distributed backend "nezha" (torch 1.13): a Python ProcessGroup over libnezha.

torch 1.13 exposes a pybind trampoline for ProcessGroup, so a Python subclass receives calls from
both Python (dist.all_reduce, ...) and C++ (DDP's parameter broadcast and gradient buckets); no C++
extension is needed. Collectives run synchronously on CPU tensors and return already-completed
Work objects (`_create_work_from_future`).

Configuration: rank and world size come from init_process_group (NEZHA_RANK/NEZHA_WORLD_SIZE, if
set, must agree). Rails and every tunable come from NEZHA_* (runtime/README.md). Two are derived
when unset:
  NEZHA_RENDEZVOUS  MASTER_ADDR:(MASTER_PORT+1) — the port next to torch's own store
NEZHA_JOB_TOKEN is never derived: torch's store is unauthenticated, so a token passed through it
would be readable by anyone who can reach the store. Every rank must have it in its environment
(the operator injects it from the job's Secret; by hand: `openssl rand -hex 32`, the same value
for every rank).
"""
import os
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, _create_work_from_future

from .communicator import Communicator, ReduceOp
from . import _env
from .errors import InvalidArgument

BACKEND_NAME = "nezha"

_ENV_LOCK = threading.Lock()
# The live group of this process. A second one would need its own rendezvous port and its rank 0
# on MASTER_ADDR, which sub-groups do not have, so it is refused instead of timing out later.
_live_group = None

_RED_OPS = {
    ReduceOp.SUM: dist.ReduceOp.RedOpType.SUM,
    ReduceOp.PROD: dist.ReduceOp.RedOpType.PRODUCT,
    ReduceOp.MIN: dist.ReduceOp.RedOpType.MIN,
    ReduceOp.MAX: dist.ReduceOp.RedOpType.MAX,
}


def _nezha_op(torch_op):
    """Maps a torch ReduceOp; AVG, PREMUL_SUM and the bitwise ops are rejected, not emulated."""
    kind = getattr(torch_op, "op", torch_op)  # a ReduceOp object carries its RedOpType in .op
    for ours, theirs in _RED_OPS.items():
        if kind == theirs:
            return ours
    raise InvalidArgument(f"nezha backend: reduce op {kind} is not supported "
                          "(want SUM, PRODUCT, MIN or MAX)")


def _done(result):
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def communicator_env(store, rank, size, env=None):
    """The NEZHA_* overrides for a communicator of this process group (exposed for tests)."""
    return _env.communicator_env(rank, size, env)


def _init_communicator(overrides):
    """Builds a Communicator with `overrides` in the environment only for the init call."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in overrides}
        os.environ.update(overrides)
        try:
            return Communicator()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _single(tensors, what):
    if len(tensors) != 1:
        raise InvalidArgument(f"nezha backend: {what} takes one tensor per process, got {len(tensors)}")
    return tensors[0]


class NezhaProcessGroup(ProcessGroup):
    """ProcessGroup whose collectives run on libnezha across all rails."""

    def __init__(self, store, rank, size, timeout=None):
        global _live_group
        if _live_group is not None and _live_group() is not None:
            raise InvalidArgument("nezha backend: this process already has a nezha process group; "
                                  "only one (the default group) is supported, use backend gloo for "
                                  "sub-groups (new_group)")
        super().__init__(rank, size)
        self._comm = _init_communicator(communicator_env(store, rank, size))
        _live_group = weakref.ref(self)

    def getBackendName(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    @property
    def communicator(self):
        return self._comm

    def allreduce(self, tensors, opts=None):
        t = _single(tensors, "allreduce")
        op = _nezha_op(opts.reduceOp) if opts is not None else ReduceOp.SUM
        self._comm.allreduce(t, op=op)
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        t = _single(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        if opts is not None and opts.rootTensor != 0:
            raise InvalidArgument(f"nezha backend: broadcast rootTensor {opts.rootTensor} (want 0)")
        self._comm.broadcast(t, root=root)
        return _done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        inp = _single(input_tensors, "allgather")
        outs = _single(output_tensors, "allgather output list")
        if len(outs) != self.size():
            raise InvalidArgument(f"nezha backend: allgather output list has {len(outs)} tensors, "
                                  f"want {self.size()}")
        for i, o in enumerate(outs):
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise InvalidArgument(f"nezha backend: allgather output[{i}] is {o.dtype}[{o.numel()}], "
                                      f"want {inp.dtype}[{inp.numel()}]")
        flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
        self._comm.allgather(inp.contiguous(), flat)
        for i, o in enumerate(outs):
            o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        return _done(output_tensors)

    def _allgather_base(self, output, input, opts=None):
        self._comm.allgather(input, output.view(-1) if output.is_contiguous() else output)
        return _done([output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _single(output_tensors, "reduce_scatter")
        ins = _single(input_tensors, "reduce_scatter input list")
        if len(ins) != self.size():
            raise InvalidArgument(f"nezha backend: reduce_scatter input list has {len(ins)} tensors, "
                                  f"want {self.size()}")
        op = _nezha_op(opts.reduceOp) if opts is not None else ReduceOp.SUM
        flat = torch.cat([t.reshape(-1) for t in ins])
        self._comm.reduce_scatter(flat, out, op=op)
        return _done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _nezha_op(opts.reduceOp) if opts is not None else ReduceOp.SUM
        self._comm.reduce_scatter(input, output, op=op)
        return _done([output])

    def barrier(self, opts=None):
        self._comm.barrier()
        return _done([])

    def _unsupported(self, name):
        raise InvalidArgument(f"nezha backend: {name} is not implemented (supported: allreduce, broadcast, "
                              "allgather, reduce_scatter, barrier)")

    def reduce(self, *args, **kwargs):
        self._unsupported("reduce")

    def gather(self, *args, **kwargs):
        self._unsupported("gather")

    def scatter(self, *args, **kwargs):
        self._unsupported("scatter")

    def alltoall(self, *args, **kwargs):
        self._unsupported("alltoall")

    def alltoall_base(self, *args, **kwargs):
        self._unsupported("alltoall_base")

    def send(self, *args, **kwargs):
        self._unsupported("send")

    def recv(self, *args, **kwargs):
        self._unsupported("recv")

    def allreduce_coalesced(self, *args, **kwargs):
        self._unsupported("allreduce_coalesced")


def _create(store, rank, size, timeout):
    return NezhaProcessGroup(store, rank, size, timeout)


def register():
    """Registers backend "nezha" with torch.distributed (idempotent)."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create)

register()
