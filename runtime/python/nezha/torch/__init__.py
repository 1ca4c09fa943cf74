"""torch.distributed backend "nezha" for PyTorch 2: a C++ c10d.Backend over libnezha.

    import nezha.torch                       # registers backend "nezha" (CPU tensors)
    dist.init_process_group("nezha", ...)    # or "cpu:nezha,cuda:nccl" for mixed jobs

Every collective returns an asynchronous Work whose Future completes on the backend's worker
thread (so DDP overlaps gradient allreduce with backward); errors are raised by wait().

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
from .. import _C

BACKEND_NAME = "nezha"
NezhaBackend = _C.NezhaBackend

_ENV_LOCK = threading.Lock()


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
            return NezhaBackend(store, rank, size, rendezvous_through_store=through_store)
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


register()
# Stops every nezha backend's threads before Python finalizes, for jobs that never call
# destroy_process_group: a backend thread that releases a tensor while the interpreter is
# finalizing would abort the process (NezhaBackend::shutdown in csrc/backend.h says why).
atexit.register(_C._shutdown_all)

__all__ = ["BACKEND_NAME", "NezhaBackend", "register"]
