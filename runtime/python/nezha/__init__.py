"""nezha: Python binding of libnezha (multi-rail collectives) and its torch.distributed backend.

    import nezha
    with nezha.Communicator() as comm:          # configured by NEZHA_* (runtime/README.md)
        comm.allreduce(array)                   # numpy arrays or CPU torch tensors, in place

    import nezha.torch                          # registers backend "nezha" (PyTorch 2)
    torch.distributed.init_process_group("nezha", ...)
"""
from .buffers import DType
from .communicator import Communicator, ReduceOp
from .errors import (AuthError, ConfigError, InternalError, InvalidArgument, LibraryNotFound,
                     LibraryVersionMismatch, MismatchError, NezhaError, RailError)

__all__ = ["Communicator", "ReduceOp", "DType", "NezhaError", "ConfigError", "RailError",
           "AuthError", "InvalidArgument", "InternalError", "LibraryNotFound",
           "LibraryVersionMismatch", "MismatchError"]
