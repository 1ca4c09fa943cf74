"""Turns numpy arrays and torch tensors into (pointer, element count, nezha dtype) for the C API.

Only contiguous host memory is accepted: the library reads and writes raw bytes, so a strided
view, a GPU tensor or a read-only array would be silently wrong or crash. Each is a clear error.
"""
import enum

from .errors import InvalidArgument


class DType(enum.IntEnum):
    """nezha_dtype_t."""

    FLOAT32 = 0
    FLOAT64 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    INT32 = 4
    INT64 = 5


_NUMPY_DTYPES = {"float32": DType.FLOAT32, "float64": DType.FLOAT64, "float16": DType.FLOAT16,
                 "int32": DType.INT32, "int64": DType.INT64}  # numpy has no bfloat16
_TORCH_DTYPES = {"torch.float32": DType.FLOAT32, "torch.float64": DType.FLOAT64,
                 "torch.float16": DType.FLOAT16, "torch.bfloat16": DType.BFLOAT16,
                 "torch.int32": DType.INT32, "torch.int64": DType.INT64}
SUPPORTED = "float32, float64, float16, bfloat16 (torch only), int32, int64"


class Buffer:
    """A borrowed view of host memory; `owner` keeps the array/tensor alive during the call."""

    __slots__ = ("owner", "ptr", "count", "dtype", "itemsize")

    def __init__(self, owner, ptr, count, dtype, itemsize):
        self.owner, self.ptr, self.count, self.dtype, self.itemsize = owner, ptr, count, dtype, itemsize


def _is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def as_buffer(obj, what, writable):
    """Validates `obj` (named `what` in errors) and returns its Buffer."""
    if _is_torch_tensor(obj):
        return _torch_buffer(obj, what)
    if hasattr(obj, "__array_interface__") and hasattr(obj, "ctypes"):
        return _numpy_buffer(obj, what, writable)
    raise InvalidArgument(f"{what}: want a numpy array or a torch tensor, got {type(obj).__name__}")


def _torch_buffer(t, what):
    if t.device.type != "cpu":
        raise InvalidArgument(f"{what}: tensor is on {t.device}; nezha collectives take CPU tensors")
    if t.is_sparse or str(t.layout) != "torch.strided":
        raise InvalidArgument(f"{what}: tensor layout {t.layout} is not dense (torch.strided)")
    if not t.is_contiguous():
        raise InvalidArgument(f"{what}: tensor is not contiguous; call .contiguous() first")
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise InvalidArgument(f"{what}: dtype {t.dtype} is not supported (want {SUPPORTED})")
    return Buffer(t, t.data_ptr(), t.numel(), dtype, t.element_size())


def _numpy_buffer(a, what, writable):
    if not a.flags["C_CONTIGUOUS"]:
        raise InvalidArgument(f"{what}: array is not C-contiguous; use numpy.ascontiguousarray")
    if writable and not a.flags["WRITEABLE"]:
        raise InvalidArgument(f"{what}: array is read-only but receives the result")
    dtype = _NUMPY_DTYPES.get(str(a.dtype))
    if dtype is None or not a.dtype.isnative:
        raise InvalidArgument(f"{what}: dtype {a.dtype} is not supported (want native {SUPPORTED})")
    return Buffer(a, a.ctypes.data, a.size, dtype, a.itemsize)
