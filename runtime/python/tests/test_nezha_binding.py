"""The ctypes binding: library lookup, buffer validation, status codes -> exceptions, numpy jobs."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import nezha_launch as launch
import nezha
import nezha._lib
from nezha._env import communicator_env
from nezha.errors import ConfigError


@pytest.fixture
def solo(monkeypatch):
    """A one-rank communicator (no rendezvous needed) on loopback."""
    for k in list(os.environ):
        if k.startswith("NEZHA_") and k != "NEZHA_LIBRARY":
            monkeypatch.delenv(k)
    monkeypatch.setenv("NEZHA_RAILS", "r0=lo:tcp")
    monkeypatch.setenv("NEZHA_RANK", "0")
    monkeypatch.setenv("NEZHA_WORLD_SIZE", "1")
    with nezha.Communicator() as comm:
        yield comm


def test_single_rank_collectives_are_identity(solo):
    assert (solo.rank, solo.world_size) == (0, 1)
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
        a = np.arange(1, 40, dtype=dtype)
        out = np.zeros_like(a)
        solo.allreduce(a, out, op="prod")
        assert np.array_equal(out, a)
        solo.allgather(a, out)
        assert np.array_equal(out, a)
        out[:] = 0
        solo.alltoall(a, out)
        assert np.array_equal(out, a)
    t = torch.arange(10, dtype=torch.bfloat16)
    solo.allreduce(t)
    solo.broadcast(t, root=0)
    assert t.tolist() == list(range(10))


@pytest.mark.parametrize("call, message", [
    (lambda c: c.allreduce(np.ones((4, 4))[:, 0]), "not C-contiguous"),
    (lambda c: c.allreduce(np.ones(4, dtype=np.uint8)), "dtype uint8 is not supported"),
    (lambda c: c.allreduce(np.ones(4, dtype=">f4")), "is not supported"),
    (lambda c: c.allreduce(np.ones(4), np.ones(4, dtype=np.float32)), "dtypes differ"),
    (lambda c: c.allreduce(np.ones(4), np.ones(5)), "has 5 elements, want 4"),
    (lambda c: c.allreduce(np.ones(4), op="avg"), "'avg' is not a reduction"),
    (lambda c: c.allgather(np.ones(4), np.ones(3)), "has 3 elements, want 4"),
    (lambda c: c.reduce_scatter(np.ones(3), np.ones(2)), "has 3 elements, want 2"),
    (lambda c: c.alltoall(np.ones(4), np.ones(5)), "has 5 elements, want 4"),
    (lambda c: c.broadcast(np.ones(4), root=1), "root 1 is out of range for world size 1"),
    (lambda c: c.allreduce([1.0, 2.0]), "want a numpy array or a torch tensor, got list"),
    (lambda c: c.allreduce(torch.ones(4, dtype=torch.complex64)), "torch.complex64 is not supported"),
    (lambda c: c.allreduce(torch.ones(4, 4).t()), "not contiguous"),
])
def test_bad_buffers_are_rejected_before_the_library(solo, call, message):
    with pytest.raises(nezha.InvalidArgument, match=message):
        call(solo)


def test_read_only_output_is_rejected(solo):
    a = np.ones(4)
    a.setflags(write=False)
    with pytest.raises(nezha.InvalidArgument, match="read-only"):
        solo.allreduce(a)


def test_closed_communicator(solo):
    solo.close()
    solo.close()  # idempotent
    with pytest.raises(nezha.NezhaError, match="closed"):
        solo.barrier()


@pytest.mark.parametrize("var, value, field", [
    ("NEZHA_RAILS", "r0=lo", "r0=lo"),
    ("NEZHA_RAILS", "r0=lo:ib", "unknown transport"),
    ("NEZHA_POLICY", "fastest", "NEZHA_POLICY"),
    ("NEZHA_WORLD_SIZE", "two", "NEZHA_WORLD_SIZE"),
])
def test_bad_env_raises_config_error_naming_the_field(monkeypatch, var, value, field):
    monkeypatch.setenv("NEZHA_RAILS", "r0=lo:tcp")
    monkeypatch.setenv("NEZHA_RANK", "0")
    monkeypatch.setenv("NEZHA_WORLD_SIZE", "1")
    monkeypatch.setenv(var, value)
    with pytest.raises(nezha.ConfigError, match=field) as e:
        nezha.Communicator()
    assert isinstance(e.value, nezha.NezhaError) and e.value.status == 1


def test_numpy_job_two_ranks(tmp_path):
    env = launch.base_env(2)
    assert "NEZHA_RANK" not in env  # the library falls back to RANK/WORLD_SIZE
    env["NEZHA_RENDEZVOUS"] = f"127.0.0.1:{int(env['MASTER_PORT']) + 1}"
    env["NEZHA_JOB_TOKEN"] = "ab" * 32
    env["TABLE_OUT"] = str(tmp_path / "table.json")
    results = launch.run("numpy", 2, env)
    assert all(rc == 0 for rc, _, _ in results), launch.describe(results)
    table = json.loads((tmp_path / "table.json").read_text())
    assert table["format"] == "nezha-table/v1" and table["rails"] == ["r0", "r1"]


def test_signed_ops_mismatch_raises_on_both_ranks():
    env = launch.base_env(2)
    env["NEZHA_RENDEZVOUS"] = f"127.0.0.1:{int(env['MASTER_PORT']) + 1}"
    env["NEZHA_JOB_TOKEN"] = "cd" * 32
    results = launch.run("signed", 2, env)
    assert all(rc == 0 for rc, _, _ in results), launch.describe(results)
    for _, rep, _ in results:
        assert "rank 0 sent operation" in rep["mismatch"] and "rank 1 sent operation" in rep["mismatch"], rep
        assert rep["after"] != "usable", rep


def _import_in_subprocess(env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("NEZHA_LIBRARY", "LD_LIBRARY_PATH")}
    env.update(env_changes, PYTHONPATH=launch.PKG_ROOT)
    code = "import nezha, nezha._lib as l\ntry:\n    l.load(); print('LOADED')\nexcept nezha.LibraryNotFound as e:\n    print('ERR', e)"
    return subprocess.run([launch.PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout


def test_library_lookup_order():
    built = os.path.join(launch.REPO, "build", "runtime")
    assert "LOADED" in _import_in_subprocess({"NEZHA_LIBRARY": os.path.join(built, "libnezha.so")})
    assert "LOADED" in _import_in_subprocess({"LD_LIBRARY_PATH": built})
    out = _import_in_subprocess({"NEZHA_LIBRARY": "/nonexistent/libnezha.so"})
    assert out.startswith("ERR NEZHA_LIBRARY=/nonexistent/libnezha.so does not load"), out
    # NEZHA_LIBRARY wins over a loadable library on LD_LIBRARY_PATH: no silent fallback.
    out = _import_in_subprocess({"NEZHA_LIBRARY": "/nonexistent/libnezha.so", "LD_LIBRARY_PATH": built})
    assert out.startswith("ERR NEZHA_LIBRARY="), out
    out = _import_in_subprocess({})
    assert out.startswith("ERR libnezha.so not found; set NEZHA_LIBRARY"), out


def _fake_library(tmp_path, c_source):
    """A shared library built from `c_source`, standing in for a libnezha of another version."""
    src, so = tmp_path / "fake.c", tmp_path / "libfake.so"
    src.write_text(c_source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True, timeout=60)
    return str(so)


def test_library_of_another_c_api_version_is_refused_naming_both(tmp_path):
    so = _fake_library(tmp_path, "int nezha_api_version(void) { return 999; }\n")
    out = _import_in_subprocess({"NEZHA_LIBRARY": so})
    assert out.startswith(f"ERR {so} implements libnezha C API version 999; this nezha binding "
                          f"needs C API version {nezha._lib.API_VERSION}"), out
    # A library from before the version function: refused too, not misread.
    so = _fake_library(tmp_path, "int nezha_rank(void* c) { return 0; }\n")
    out = _import_in_subprocess({"NEZHA_LIBRARY": so})
    assert out.startswith(f"ERR {so} has no nezha_api_version()"), out
    assert f"needs C API version {nezha._lib.API_VERSION}" in out, out


def test_backend_env_derivation():
    token = "cd" * 32
    base = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "NEZHA_JOB_TOKEN": token}
    env0 = communicator_env(0, 4, base)
    env3 = communicator_env(3, 4, base)
    assert env0["NEZHA_RENDEZVOUS"] == "10.0.0.5:29501"
    assert (env0["NEZHA_RANK"], env3["NEZHA_RANK"], env3["NEZHA_WORLD_SIZE"]) == ("0", "3", "4")
    # The token comes from each rank's environment; it is never derived or passed on.
    assert "NEZHA_JOB_TOKEN" not in env0
    # A group that finds its rendezvous through torch's store derives none.
    assert "NEZHA_RENDEZVOUS" not in communicator_env(0, 4, base, derive_rendezvous=False)
    assert "NEZHA_RENDEZVOUS" not in communicator_env(0, 4, {"NEZHA_JOB_TOKEN": token},
                                                      derive_rendezvous=False)
    # Explicit settings are kept, never overridden.
    given = dict(base, NEZHA_RENDEZVOUS="h:1")
    assert "NEZHA_RENDEZVOUS" not in communicator_env(1, 2, given)


def test_backend_refuses_to_make_up_a_token():
    base = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    with pytest.raises(ConfigError, match="NEZHA_JOB_TOKEN is not set"):
        communicator_env(0, 2, base)
    # One rank needs neither.
    assert communicator_env(0, 1, {}) == {"NEZHA_RANK": "0", "NEZHA_WORLD_SIZE": "1"}


def test_a_mounted_token_file_is_enough():
    # The runtime reads the file itself; the token never enters the environment.
    env = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500",
           "NEZHA_JOB_TOKEN_FILE": "/var/run/nezha/token"}
    out = communicator_env(1, 2, env)
    assert "NEZHA_JOB_TOKEN" not in out


@pytest.mark.parametrize("env, message", [
    ({"MASTER_PORT": "29500"}, "MASTER_ADDR and MASTER_PORT must both be set"),
    ({"MASTER_ADDR": "h"}, "MASTER_ADDR and MASTER_PORT must both be set"),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "x"}, "MASTER_PORT='x' is not a port number"),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "65535"}, "MASTER_PORT=65535 leaves no room"),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "1", "NEZHA_WORLD_SIZE": "3"}, "NEZHA_WORLD_SIZE=3 disagrees"),
])
def test_backend_env_errors(env, message):
    with pytest.raises(nezha.ConfigError, match=message):
        communicator_env(0, 2, env)


def test_torch_backend_without_its_extension_says_how_to_get_it():
    """The source tree (like the runtime image's /opt/nezha/python) has no nezha._C: importing
    nezha.torch names the fix instead of a bare 'cannot import _C'."""
    code = "import nezha.torch"
    env = dict(os.environ, PYTHONPATH=launch.PKG_ROOT)
    out = subprocess.run([launch.PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "nezha.torch needs the C++ extension nezha._C" in out.stderr, out.stderr
    assert "pip install --no-build-isolation ./runtime/python" in out.stderr, out.stderr
