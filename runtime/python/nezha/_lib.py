"""Locates and loads libnezha.so and declares the C API's prototypes (runtime/include/nezha/nezha.h).

Search order, first hit wins (a library that loads must implement this binding's C API version,
API_VERSION, or loading fails naming both versions):
  1. NEZHA_LIBRARY: a path to the shared library (an error if it does not load; no fallback)
  2. libnezha.so next to this package (wheel/image layouts copy it there)
  3. the dynamic loader: LD_LIBRARY_PATH, then the ldconfig cache
"""
import ctypes
import ctypes.util
import os
import threading

from .errors import LibraryNotFound, LibraryVersionMismatch

LIBRARY_ENV = "NEZHA_LIBRARY"
_SONAMES = ("libnezha.so.0", "libnezha.so")
# NEZHA_API_VERSION (runtime/include/nezha/nezha.h) of the C API the prototypes below describe.
API_VERSION = 2

_lock = threading.Lock()
_lib = None


def _check_api_version(lib, path):
    """Refuses a library built from another C API version: ctypes would pass arguments by the
    prototypes below whatever the library expects, so a mismatch would misread them silently."""
    try:
        fn = lib.nezha_api_version
    except AttributeError:
        raise LibraryVersionMismatch(
            f"{path} has no nezha_api_version(): a libnezha older than C API version 1 (or not "
            f"libnezha); this nezha binding needs C API version {API_VERSION}. Install the "
            "libnezha built from the same source as this package") from None
    fn.restype, fn.argtypes = ctypes.c_int, []
    got = fn()
    if got != API_VERSION:
        raise LibraryVersionMismatch(
            f"{path} implements libnezha C API version {got}; this nezha binding needs C API "
            f"version {API_VERSION}. Install the libnezha built from the same source as this "
            "package")


def _declare(lib):
    c_int, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
    comm_p = ctypes.POINTER(c_void_p)
    protos = {
        "nezha_init_from_env": (c_int, [comm_p]),
        "nezha_destroy": (None, [c_void_p]),
        "nezha_rank": (c_int, [c_void_p]),
        "nezha_world_size": (c_int, [c_void_p]),
        "nezha_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "nezha_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "nezha_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
        "nezha_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "nezha_alltoall": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
        "nezha_barrier": (c_int, [c_void_p]),
        "nezha_save_table": (c_int, [c_void_p, c_char_p]),
        "nezha_sign_next_op": (c_int, [c_void_p, c_char_p, c_size_t]),
        "nezha_last_error": (c_char_p, []),
    }
    for name, (restype, argtypes) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise LibraryNotFound(f"{lib._name} lacks {name}: not a compatible libnezha") from e
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _candidates():
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit is not None:
        if not explicit:
            raise LibraryNotFound(f"{LIBRARY_ENV} is set but empty; want a path to libnezha.so")
        return [explicit], True
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, so) for so in _SONAMES if os.path.exists(os.path.join(here, so))]
    paths += list(_SONAMES)  # bare names: the loader searches LD_LIBRARY_PATH and ld.so.cache
    found = ctypes.util.find_library("nezha")
    if found:
        paths.append(found)
    return paths, False


def load():
    """The loaded library (loaded once per process)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        paths, explicit = _candidates()
        errors = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                if explicit:
                    raise LibraryNotFound(f"{LIBRARY_ENV}={path} does not load: {e}") from e
                errors.append(f"{path}: {e}")
                continue
            # A loadable library of the wrong version is an error, not a reason to try the
            # next candidate: which one the loader picks must not change silently.
            _check_api_version(lib, path)
            _lib = _declare(lib)
            return _lib
        raise LibraryNotFound(
            "libnezha.so not found; set NEZHA_LIBRARY to its path (e.g. build/runtime/libnezha.so "
            "after `make build-runtime`), put it next to the nezha package, or on LD_LIBRARY_PATH. "
            "Tried: " + "; ".join(errors))


def last_error():
    msg = load().nezha_last_error()
    return msg.decode("utf-8", "replace") if msg else ""
