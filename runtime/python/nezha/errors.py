"""Exceptions mirroring libnezha's status codes (nezha.h), each carrying the library's message."""


class NezhaError(RuntimeError):
    """Base of every error raised by the nezha package."""

    status = None  # nezha_status_t value, set on the subclasses that map one


class ConfigError(NezhaError):
    """NEZHA_ERR_CONFIG: bad environment or options; the message names the field."""

    status = 1


class RailError(NezhaError):
    """NEZHA_ERR_RAIL: a rail's network I/O failed or timed out. The communicator is unusable
    afterwards (fail-stop, see runtime/README.md); build a new one."""

    status = 2


class AuthError(NezhaError):
    """NEZHA_ERR_AUTH: a peer or the rendezvous failed the NEZHA_JOB_TOKEN proof."""

    status = 3


class InvalidArgument(NezhaError, ValueError):
    """NEZHA_ERR_INVALID, or a bad argument caught in Python before calling the library."""

    status = 4


class InternalError(NezhaError):
    """NEZHA_ERR_INTERNAL: a bug check in the library failed."""

    status = 5


class MismatchError(NezhaError):
    """NEZHA_ERR_MISMATCH: the ranks called different operations (the signatures given with
    Communicator.sign_next_op differ, or the ranks are in different operations); the message
    names each rank's operation and signature. Not a rail failure: the communicator is unusable
    afterwards; build a new one."""

    status = 6


class LibraryNotFound(NezhaError, OSError):
    """libnezha.so could not be located or loaded."""


class LibraryVersionMismatch(LibraryNotFound):
    """The libnezha.so found implements another C API version than this binding's (or none)."""


BY_STATUS = {cls.status: cls for cls in (ConfigError, RailError, AuthError, InvalidArgument,
                                         InternalError, MismatchError)}


def from_status(status, message):
    """The exception for a failed call's status; unknown codes are reported, never ignored."""
    cls = BY_STATUS.get(status)
    if cls is None:
        return InternalError(f"libnezha returned unknown status {status}: {message}")
    return cls(message)
