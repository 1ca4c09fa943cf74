"""torch.distributed backend "nezha" for PyTorch 2: a C++ c10d.Backend over libnezha.

    import nezha.torch                       # registers backend "nezha" (CPU tensors)
    dist.init_process_group("nezha", ...)    # or "cpu:nezha,cuda:nccl" for mixed jobs

Every collective returns an asynchronous Work (so DDP overlaps gradient allreduce with
backward); its Future completes on a completion thread, never the backend's worker, so a
then() callback may issue and wait on collectives (torch's PowerSGD hook does). Errors are
raised by wait(); ranks that call different collectives get a MismatchError on every rank
(runtime/python/README.md, "Mismatched collectives").

Configuration: rank and world size come from init_process_group (NEZHA_RANK/NEZHA_WORLD_SIZE,
if set, must agree). Rails and every tunable come from NEZHA_* (runtime/README.md).
NEZHA_RENDEZVOUS defaults to MASTER_ADDR:(MASTER_PORT+1). NEZHA_JOB_TOKEN is never derived:
torch's store is unauthenticated; every rank needs the job's secret in its environment.
"""
import atexit
import os
import threading

import torch
import torch.distributed as dist

from .._env import communicator_env
try:
    from .. import _C
except ImportError as e:
    # The runtime image's /opt/nezha/python (what the operator injects) is the ctypes binding
    # only: the c10d extension must be compiled against the torch that imports it.
    raise ImportError(
        f"nezha.torch needs the C++ extension nezha._C built against this torch "
        f"({torch.__version__}); this nezha package ({__file__}) has none: install it with "
        "`pip install --no-build-isolation ./runtime/python` in the training image, and do not "
        "inject Nezha's runtime into images that ship it (runtime/python/README.md)") from e

BACKEND_NAME = "nezha"
NezhaBackend = _C.NezhaBackend

_ENV_LOCK = threading.Lock()

# Every collective's signature is compared across ranks before it runs (csrc/op_signature.h).
# "off" exists to measure what the check costs (bench, runtime/python/README.md); any other
# value is an error naming the variable.
SIGNATURES_ENV = "NEZHA_TORCH_SIGNATURES"

# torchrun (and any elastic agent that shares its store with the workers) keeps one store for
# every attempt of a job and restarts the workers with the same keys: what a killed attempt
# published (each rank's p2p listener, a subgroup's rendezvous endpoint) is still there when the
# next attempt reads it, and a rank that reads before its peer republishes dials a dead process.
# Each attempt therefore keeps its keys under its own prefix.
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"


def _check_signatures():
    value = os.environ.get(SIGNATURES_ENV, "on")
    if value not in ("on", "off"):
        raise ValueError(f"{SIGNATURES_ENV}={value!r} is not valid (want on or off)")
    return value == "on"


def _timeout_ms(timeout):
    """The group's timeout (init_process_group(timeout=), a timedelta) in whole ms, >= 1."""
    if timeout is None:
        return 30 * 60 * 1000  # torch's default for non-NCCL backends
    return max(1, int(timeout.total_seconds() * 1000))


def _attempt_store(store):
    """The store under this attempt's own prefix when an elastic agent restarts the workers."""
    attempt = os.environ.get(RESTART_COUNT_ENV)
    if attempt is None:
        return store
    if not (attempt.isascii() and attempt.isdigit()):
        raise ValueError(f"{RESTART_COUNT_ENV}={attempt!r} is not valid (want the agent's "
                         "restart count, a whole number >= 0)")
    return dist.PrefixStore(f"nezha/attempt_{int(attempt)}", store)


def _create_backend(store, rank, size, timeout):
    """register_backend creator: builds the communicator with the derived NEZHA_* in the
    environment for the duration of the (blocking, GIL-free) join."""
    # The default group (created while no group exists yet) joins at NEZHA_RENDEZVOUS, the
    # endpoint the operator and the docs define. Every later nezha group (new_group, FSDP's
    # hybrid-sharding subgroups) gets its own endpoint through torch's store instead: two groups
    # cannot share one (csrc/backend.h).
    through_store = dist.is_initialized()
    overrides = communicator_env(rank, size, derive_rendezvous=not through_store)
    if through_store and size > 1:
        # Options::fromEnv wants an endpoint for a multi-rank job; the backend replaces this
        # one with the endpoint from the store before joining (NezhaBackend::rendezvousThrough).
        overrides["NEZHA_RENDEZVOUS"] = "127.0.0.1:1"
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in overrides}
        os.environ.update(overrides)
        try:
            return NezhaBackend(_attempt_store(store), rank, size,
                                rendezvous_through_store=through_store,
                                timeout_ms=_timeout_ms(timeout),
                                check_signatures=_check_signatures())
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def register():
    """Registers backend "nezha" for CPU tensors (idempotent)."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    # CPU only: torch builds one backend per device it maps, and a second communicator would
    # need its own rendezvous. A CUDA tensor in a nezha-only group gets torch's "no backend for
    # device cuda"; GPU jobs use "cpu:nezha,cuda:nccl" with the NCCL net plugin (docs/nccl.md).
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu"])


def _nezha_backend(group, what):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    be = pg._get_backend(torch.device("cpu"))
    if not isinstance(be, NezhaBackend):
        raise TypeError(f"{what} needs a process group whose CPU backend is nezha, got "
                        f"{type(be).__name__} (init_process_group(\"nezha\"))")
    return pg, be


def allreduce_with_priority(tensor, priority, group=None):
    """SUM allreduce of `tensor` (CPU, in place) that may overtake prioritised collectives
    issued before it and still queued: priority 0..2**31-1, higher first, ties in issue order.
    Returns a Work (wait(), get_future()). Never overtakes an operation issued without a
    priority. Every rank must issue it at the same point, as any collective (rank 0 decides
    the order for all ranks; runtime/python/README.md)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"allreduce_with_priority: priority must be an int in 0..2**31-1, got "
                        f"{type(priority).__name__} {priority!r}")
    if not 0 <= priority <= 2**31 - 1:
        raise ValueError(f"allreduce_with_priority: priority {priority} is out of range "
                         "(want 0..2**31-1, higher runs first)")
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"allreduce_with_priority: tensor must be a torch.Tensor, got "
                        f"{type(tensor).__name__}")
    _, be = _nezha_backend(group, "allreduce_with_priority")
    return be.allreduce_with_priority(tensor, priority)


def priority_hook(state, bucket):
    """DDP comm hook: each gradient bucket's allreduce gets priority bucket.index(), so the
    bucket the next forward pass needs first is reduced first when several wait in the queue.

        model.register_comm_hook(None, nezha.torch.priority_hook)   # or a process group

    DDP fills buckets in reverse parameter order (index 0 holds the last layers, the first
    gradients ready in backward), so the highest index holds the first layers: issued last,
    it overtakes the buckets still queued. Averages like DDP's default hook (divide, then sum).
    `state`: the process group (None = the default group), as DDP's built-in hooks take it."""
    pg, be = _nezha_backend(state, "priority_hook")
    t = bucket.buffer()
    t.div_(pg.size())
    fut = be.allreduce_with_priority(t, bucket.index()).get_future()
    return fut.then(lambda f: f.value()[0])


register()
# Stops every nezha backend's threads before Python finalizes, for jobs that never call
# destroy_process_group: a backend thread that releases a tensor while the interpreter is
# finalizing would abort the process (NezhaBackend::shutdown in csrc/backend.h says why).
atexit.register(_C._shutdown_all)

__all__ = ["BACKEND_NAME", "NezhaBackend", "allreduce_with_priority", "priority_hook", "register"]
