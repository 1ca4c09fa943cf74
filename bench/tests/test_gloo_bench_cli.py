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
    for flag in ("--min-bytes", "--max-bytes", "--check", "--json", "--iface", "--store-dir", "--loop-seconds",
                 "--split"):
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


SPLIT = ["--rank", "0", "--world-size", "2", "--store-dir", "/nonexistent-nzb"]


@pytest.mark.parametrize("iface,split,msg", [
    ("lo,lo2", None, "--split: required with several interfaces (--iface 'lo,lo2')"),
    ("lo,lo2", "0.5,0.3,0.2", "--split: 3 shares for 2 interfaces in --iface 'lo,lo2'"),
    ("lo", "0.5,0.5", "--split: 2 shares for 1 interfaces in --iface 'lo'"),
    ("lo,lo2", "0.7,0.7", "--split: shares must sum to 1, '0.7,0.7' sums to 1.4"),
    ("lo,lo2", "1,0", "--split: want shares > 0 like 0.73,0.27, got '0'"),
    ("lo,lo2", "0.5,-0.5", "--split: want shares > 0 like 0.73,0.27, got '-0.5'"),
    ("lo,lo2", "0.5,x", "--split: want shares > 0 like 0.73,0.27, got 'x'"),
    ("lo,lo2", "0.5,", "--split: want shares > 0 like 0.73,0.27, got ''"),
    ("lo,lo2", "", "--split: want shares like 0.73,0.27, got ''"),
    ("lo,,lo2", "0.3,0.3,0.4", "--iface: empty interface name in 'lo,,lo2'"),
    ("lo,lo", "0.5,0.5", "--iface: interface 'lo' listed twice in 'lo,lo'"),
])
def test_bad_hand_split_exits_2_naming_the_flag(iface, split, msg):
    p = run(SPLIT + ["--iface", iface] + (["--split", split] if split is not None else []))
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr


def test_hand_split_rejects_rail_name_and_loop():
    args = SPLIT + ["--iface", "lo,lo2", "--split", "0.5,0.5"]
    p = run(args + ["--rail-name", "x"])
    assert p.returncode == 2 and "--rail-name: only with one interface" in p.stderr
    p = run(args + ["--loop-seconds", "5", "--trace", "/tmp/x"])
    assert p.returncode == 2 and "--loop-seconds: only with one interface, not with a hand split" in p.stderr


def test_hand_split_from_env_names_the_variable():
    p = run(SPLIT, env={"GLOO_BENCH_IFACE": "lo,lo2"})
    assert p.returncode == 2 and "--split: required with several interfaces (GLOO_BENCH_IFACE 'lo,lo2')" in p.stderr


def test_valid_hand_split_gets_past_parsing(tmp_path):
    # Shares written with three decimals sum to 0.999: within the tolerance. Parsing passes and the
    # unknown second interface is what stops it, before any rendezvous.
    p = run(["--rank", "0", "--world-size", "2", "--iface", "lo,nzbnope0", "--split", "0.333,0.666",
             "--store-dir", str(tmp_path)])
    assert p.returncode == 2 and "--iface: cannot use interface 'nzbnope0'" in p.stderr
