"""hack/gpu-check.sh --one-node (docs/nccl.md, "One-GPU proof") on a machine without a GPU: its
command line, its refusals (no root, no plugin, no CUDA build of torch or no GPU) before
anything is set up, and the dry run, which does everything but the CUDA part for real (the rail
test bed, the plugin's ABI tables looked up, each rank's environment composed) and tears the
bed down again. The CUDA part runs only on a GPU machine. The CPU rehearsal
(--rehearse-on-cpu: every step with gloo) takes ~45 s and the pinned torch venv, too slow for
this suite; docs/nccl.md records its output.

Run as root: /usr/bin/python3 -m pytest -q hack/tests/test_gpu_check.py (needs the runtime
built: make build-runtime)
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_CHECK = REPO / "hack" / "gpu-check.sh"
PLUGIN_DIR = REPO / "build" / "runtime"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def gpu_check(*args, prefix=()):
    return subprocess.run([*prefix, str(GPU_CHECK), "--one-node", *args], capture_output=True,
                          text=True, timeout=120)


def bed_namespaces():
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in names.splitlines() if line.startswith("nzgpu-")]


@pytest.fixture
def plugin_dir():
    if not (PLUGIN_DIR / "libnccl-net-nezha.so").exists():
        pytest.fail(f"no {PLUGIN_DIR}/libnccl-net-nezha.so: build the runtime first (make build-runtime)")
    return str(PLUGIN_DIR)


def fake_python(tmp_path, torch_source):
    """A python3 whose `import torch` runs TORCH_SOURCE: the probe's real code against a torch
    without CUDA, one that sees no GPU, or none at all."""
    pkg = tmp_path / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(torch_source)
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{tmp_path / "site"}" exec /usr/bin/python3 "$@"\n')
    py.chmod(0o755)
    return str(py)


CPU_TORCH = """
__version__ = "2.5.1+cpu"
class version:
    cuda = None
"""
NO_GPU_TORCH = """
__version__ = "2.5.1+cu124"
class version:
    cuda = "12.4"
class cuda:
    @staticmethod
    def is_available():
        return False
"""
NO_TORCH = "raise ImportError(\"No module named 'torch'\")\n"


def test_help_lists_every_flag():
    proc = gpu_check("--help")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--dry-run", "--rehearse-on-cpu", "--out", "--plugin-dir", "--python", "--gpu", "--bytes", "--iters",
                 "--rate", "--min-speedup", "--cut-seconds"):
        assert flag in proc.stdout, proc.stdout


def test_the_multi_node_usage_names_the_one_node_mode():
    proc = subprocess.run([str(GPU_CHECK), "-h"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--one-node" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,named", [
    (["--bogus"], "unknown argument '--bogus'"),
    (["--out"], "--out: needs a value"),
    (["--iters", "0"], "--iters: want an integer in 1..100000, got '0'"),
    (["--bytes", "64M"], "--bytes: want an integer"),
    (["--rate", "fast"], "--rate: want an integer in 10..100000, got 'fast'"),
    (["--min-speedup", "x2"], "--min-speedup: want a number like 1.9, got 'x2'"),
    (["--cut-seconds", "0"], "--cut-seconds: want an integer in 1..600"),
    (["--gpu", "-1"], "--gpu: want an integer in 0..63"),
    (["--dry-run", "--rehearse-on-cpu"], "--dry-run and --rehearse-on-cpu: pick one"),
])
def test_bad_usage_exits_2_naming_the_flag(args, named):
    proc = gpu_check(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert named in proc.stderr, proc.stderr


def test_without_root_it_refuses_before_touching_anything():
    prefix = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
    proc = gpu_check("--dry-run", prefix=prefix)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "needs root" in proc.stderr, proc.stderr


@needs_root
def test_a_missing_or_broken_plugin_is_named(tmp_path):
    proc = gpu_check("--dry-run", "--plugin-dir", str(tmp_path))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"--plugin-dir: no {tmp_path}/libnccl-net-nezha.so" in proc.stderr, proc.stderr
    (tmp_path / "libnccl-net-nezha.so").write_text("not a shared object\n")
    proc = gpu_check("--dry-run", "--plugin-dir", str(tmp_path))
    assert proc.returncode == 1 and "does not load" in proc.stderr, proc.stderr
    assert bed_namespaces() == []


@needs_root
@pytest.mark.parametrize("torch_source,said", [
    (CPU_TORCH, "torch 2.5.1+cpu is built without CUDA"),
    (NO_GPU_TORCH, "torch 2.5.1+cu124 (CUDA 12.4) sees no GPU"),
    (NO_TORCH, "no torch (No module named 'torch')"),
])
def test_without_a_gpu_it_stops_before_the_bed(tmp_path, plugin_dir, torch_source, said):
    py = fake_python(tmp_path, torch_source)
    proc = gpu_check("--plugin-dir", plugin_dir, "--python", py, "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"--python {py}: {said}" in proc.stderr, proc.stderr
    assert "needs a GPU and a CUDA build of torch" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
    assert bed_namespaces() == []


@needs_root
def test_a_rehearsal_still_needs_torch(tmp_path, plugin_dir):
    py = fake_python(tmp_path, NO_TORCH)
    proc = gpu_check("--rehearse-on-cpu", "--plugin-dir", plugin_dir, "--python", py)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"--python {py}: no torch (No module named 'torch')" in proc.stderr, proc.stderr
    assert bed_namespaces() == []


def env_file(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@needs_root
def test_dry_run_sets_up_everything_but_the_cuda_part(tmp_path, plugin_dir):
    out = tmp_path / "evidence"
    py = fake_python(tmp_path, CPU_TORCH)
    proc = gpu_check("--dry-run", "--plugin-dir", plugin_dir, "--python", py, "--out", str(out))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stopping before the CUDA part, which needs a GPU" in proc.stdout, proc.stdout
    assert "here: torch 2.5.1+cpu is built without CUDA" in proc.stdout, proc.stdout
    summary = (out / "summary.txt").read_text()
    plugin = os.path.realpath(os.path.join(plugin_dir, "libnccl-net-nezha.so"))
    assert f"plugin {plugin} (" in summary and "ncclNetPlugin_v11" in summary, summary
    assert "bed nzgpu: 2 hosts x 2 rails at 2000 Mbit/s (reno)" in summary, summary
    ranks = [env_file(out / f"env.rank{r}.txt") for r in (0, 1)]
    for r, env in enumerate(ranks):
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == "2"
        # Two hosts to NCCL, so the GPU's data must leave through the network plugin.
        assert env["NCCL_HOSTID"] == f"nezha-gpu-check-host{r}"
        assert env["NCCL_P2P_DISABLE"] == "1" and env["NCCL_SHM_DISABLE"] == "1"
        assert env["NCCL_NET_PLUGIN"] == "nezha" and env["NCCL_NET"] == "nezha"
        assert env["LD_LIBRARY_PATH"].split(":")[0] == os.path.dirname(plugin)
        assert env["NCCL_DEBUG"] == "INFO"
        assert env["NEZHA_RAILS"] == "r0=r0:tcp,r1=r1:tcp"
        assert env["MASTER_ADDR"] == "10.100.0.10"  # host 0's rail-0 address on the bed
        assert len(env["NEZHA_JOB_TOKEN"]) == 64
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert ranks[0]["NEZHA_JOB_TOKEN"] == ranks[1]["NEZHA_JOB_TOKEN"]
    assert bed_namespaces() == [], "the bed must be gone after the dry run"
