"""gloo-bench's flag and environment checking (no rendezvous, no sockets). Skipped when
build/bench/gloo-bench has not been built."""

import os
import subprocess

import pytest

BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "build", "bench", "gloo-bench")
pytestmark = pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"{BIN} not built")

BASE = ["--rank", "0", "--world-size", "2", "--iface", "lo", "--store-dir", "/nonexistent-nzb"]


def run(args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GLOO_BENCH_") and k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run([BIN, *args], capture_output=True, text=True, env={**e, **(env or {})}, timeout=30)


def test_help_lists_shared_and_own_flags():
    p = run(["--help"])
    assert p.returncode == 0
    for flag in ("--min-bytes", "--max-bytes", "--check", "--json", "--iface", "--store-dir", "--loop-seconds"):
        assert flag in p.stdout


@pytest.mark.parametrize("args,msg", [
    (["--op", "broadcast"], "--op: gloo-bench only runs allreduce"),
    (["--dtype", "float16"], "--dtype: want float32, float64, int32 or int64, got 'float16'"),
    (["--min-bytes", "1X"], "--min-bytes: want a size like 4096, 1K, 256M, got '1X'"),
    (["--min-bytes", "4K", "--max-bytes", "1K"], "--max-bytes: 1024 is below --min-bytes 4096"),
    (["--iters", "0"], "--iters: want an integer in 1..1000000, got '0'"),
    (["--factor", "1"], "--factor: want an integer in 2..1024, got '1'"),
    (["--loop-seconds", "5"], "--trace: required with --loop-seconds"),
    (["--trace", "/tmp/x"], "--loop-seconds: required with --trace"),
    (["--bogus"], "unknown argument '--bogus'"),
    (["--json"], "--json: needs a value"),
])
def test_bad_flags_exit_2_naming_the_flag(args, msg):
    p = run(BASE + args)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr


def test_rank_must_be_below_world_size():
    p = run(["--rank", "2", "--world-size", "2", "--iface", "lo", "--store-dir", "/tmp"])
    assert p.returncode == 2 and "--rank: want an integer in 0..1, got '2'" in p.stderr


def test_missing_settings_name_flag_and_env():
    p = run(["--world-size", "2", "--iface", "lo", "--store-dir", "/tmp"])
    assert p.returncode == 2 and "--rank or GLOO_BENCH_RANK or RANK: required" in p.stderr


def test_env_fallbacks_are_read_and_checked():
    p = run(["--iface", "lo", "--store-dir", "/tmp"], env={"WORLD_SIZE": "2", "GLOO_BENCH_RANK": "x"})
    assert p.returncode == 2 and "GLOO_BENCH_RANK: want an integer in 0..1, got 'x'" in p.stderr


def test_unwritable_store_dir_is_named():
    p = run(BASE)
    assert p.returncode == 2 and "--store-dir: '/nonexistent-nzb' is not a writable directory" in p.stderr


def test_unknown_interface_is_named(tmp_path):
    p = run(["--rank", "0", "--world-size", "2", "--iface", "nzbnope0", "--store-dir", str(tmp_path)])
    assert p.returncode == 2 and "--iface: cannot use interface 'nzbnope0'" in p.stderr
