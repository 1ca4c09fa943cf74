"""Communicator: the Python face of one libnezha communicator (nezha_comm_t)."""
import ctypes
import enum
import os
import threading

from . import _lib
from .buffers import as_buffer
from .errors import InvalidArgument, NezhaError, from_status


class ReduceOp(enum.IntEnum):
    """nezha_op_t."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3


def _reduce_op(op):
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str):
        key = {"product": "prod"}.get(op.lower(), op.lower())
        for member in ReduceOp:
            if member.name.lower() == key:
                return member
    raise InvalidArgument(f"op: {op!r} is not a reduction (want sum, prod, min or max)")


def _check(status):
    if status != 0:
        raise from_status(status, _lib.last_error())


class Communicator:
    """A multi-rail communicator built from the NEZHA_* environment (runtime/README.md).

    Construction blocks until every rank has joined (bounded by NEZHA_RENDEZVOUS_TIMEOUT_MS).
    Collectives must be called by every rank in the same order with the same sizes. Calls are
    serialized by a lock (the library requires one collective at a time per communicator) and
    release the GIL while they run.
    """

    def __init__(self, env=None):
        """`env`: optional overrides applied to os.environ before init (the library reads the
        process environment); useful to set NEZHA_RANK/NEZHA_WORLD_SIZE from another launcher."""
        lib = _lib.load()
        if env:
            for key, value in env.items():
                os.environ[key] = str(value)
        handle = ctypes.c_void_p()
        _check(lib.nezha_init_from_env(ctypes.byref(handle)))
        self._lib = lib
        self._handle = handle
        self._lock = threading.Lock()
        self.rank = lib.nezha_rank(handle)
        self.world_size = lib.nezha_world_size(handle)

    # -- lifetime ------------------------------------------------------------------------------
    def close(self):
        """Frees the communicator (idempotent)."""
        with self._lock:
            if self._handle is not None:
                self._lib.nezha_destroy(self._handle)
                self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self._lib.nezha_destroy(self._handle)
            self._handle = None

    def _call(self, fn, *args):
        with self._lock:
            if self._handle is None:
                raise NezhaError("communicator is closed")
            _check(fn(self._handle, *args))

    # -- collectives ---------------------------------------------------------------------------
    def allreduce(self, send, recv=None, op=ReduceOp.SUM):
        """Reduces `send` over all ranks into `recv` (in place when recv is None or send)."""
        s = as_buffer(send, "allreduce send", writable=recv is None)
        r = s if recv is None else as_buffer(recv, "allreduce recv", writable=True)
        _same(s, r, "allreduce", s.count)
        self._call(self._lib.nezha_allreduce, s.ptr, r.ptr, s.count, s.dtype, _reduce_op(op))
        return recv if recv is not None else send

    def broadcast(self, buf, root=0):
        """Copies `buf` of rank `root` into `buf` on every rank."""
        b = as_buffer(buf, "broadcast buf", writable=True)
        self._check_root(root)
        self._call(self._lib.nezha_broadcast, b.ptr, b.count, b.dtype, int(root))
        return buf

    def allgather(self, send, recv):
        """Gathers every rank's `send` (count elements) into `recv` (world_size * count),
        ordered by rank."""
        s = as_buffer(send, "allgather send", writable=False)
        r = as_buffer(recv, "allgather recv", writable=True)
        _same(s, r, "allgather", s.count * self.world_size)
        self._call(self._lib.nezha_allgather, s.ptr, r.ptr, s.count, s.dtype)
        return recv

    def reduce_scatter(self, send, recv, op=ReduceOp.SUM):
        """Reduces `send` (world_size * count) over ranks; rank i receives block i (count)."""
        s = as_buffer(send, "reduce_scatter send", writable=False)
        r = as_buffer(recv, "reduce_scatter recv", writable=True)
        _same(r, s, "reduce_scatter", r.count * self.world_size)
        self._call(self._lib.nezha_reduce_scatter, s.ptr, r.ptr, r.count, s.dtype, _reduce_op(op))
        return recv

    def alltoall(self, send, recv):
        """Block i of `send` (world_size blocks of count elements) goes to rank i; block i of
        `recv` (same size) comes from rank i. Each block moves once, split across rails."""
        s = as_buffer(send, "alltoall send", writable=False)
        r = as_buffer(recv, "alltoall recv", writable=True)
        _same(s, r, "alltoall", s.count)
        if s.count % self.world_size:
            raise InvalidArgument(f"alltoall: {s.count} elements are not {self.world_size} equal blocks")
        self._call(self._lib.nezha_alltoall, s.ptr, r.ptr, s.count // self.world_size, s.dtype)
        return recv

    def barrier(self):
        self._call(self._lib.nezha_barrier)

    def sign_next_op(self, signature):
        """Signs the next collective with `signature` (bytes, at most 32; an opaque digest of
        the call's arguments, the caller's to choose): every rank compares it with its peers'
        in that operation's first frames, and ranks that signed differently get MismatchError
        (nezha_sign_next_op in nezha.h)."""
        if not isinstance(signature, (bytes, bytearray)):
            raise InvalidArgument(f"sign_next_op signature: {type(signature).__name__}, want bytes")
        self._call(self._lib.nezha_sign_next_op, bytes(signature), len(signature))

    def save_table(self, path):
        """Writes the learned data-length table (split ratios) as JSON."""
        self._call(self._lib.nezha_save_table, os.fsencode(path))

    def _check_root(self, root):
        if not isinstance(root, int) or not 0 <= root < self.world_size:
            raise InvalidArgument(f"root {root!r} is out of range for world size {self.world_size}")


def _same(a, b, what, want_b_count):
    """Checks dtype agreement and that `b` has the element count the collective needs."""
    if a.dtype != b.dtype:
        raise InvalidArgument(f"{what}: send and recv dtypes differ ({a.dtype.name} vs {b.dtype.name})")
    if b.count != want_b_count:
        raise InvalidArgument(f"{what}: buffer has {b.count} elements, want {want_b_count}")
