"""hack/demo.sh (`make demo`) without a cluster: its command line, its refusal without root, and
the throughput story it prints from sampled runtime metrics. The demo itself runs end to end in
e2e/demo (`make test-demo`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "hack" / "demo.sh"
STORY = REPO / "hack" / "lib" / "demo-story.py"


def demo(*args, env=None, prefix=()):
    return subprocess.run([*prefix, str(DEMO), *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=60)


def test_help_exits_0_and_lists_the_flags():
    proc = demo("--help")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--cluster", "--keep", "--seconds", "--cut-after", "--cut-for", "--rate", "--out"):
        assert flag in proc.stdout, proc.stdout


@pytest.mark.parametrize("args,env,named", [
    (["--bogus"], {}, "unknown argument '--bogus'"),
    (["--rate"], {}, "--rate: needs a value"),
    (["--seconds", "ten"], {}, "--seconds: want an integer"),
    (["--seconds", "40"], {}, "--seconds 40: want at least"),
    (["--cut-for", "0"], {}, "--cut-for: want an integer in 5..600"),
    ([], {"DEMO_KEEP": "yes"}, "DEMO_KEEP: want 0 or 1"),
    (["--cluster", "minikube"], {}, "--cluster (or DEMO_CLUSTER): want auto, kind or local, got 'minikube'"),
    ([], {"DEMO_CLUSTER": "k3s"}, "want auto, kind or local, got 'k3s'"),
    (["--cluster"], {}, "--cluster: needs a value"),
])
def test_bad_usage_exits_2_naming_the_flag(args, env, named):
    proc = demo(*args, env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert named in proc.stderr, proc.stderr


def test_without_root_it_refuses_before_touching_anything():
    prefix = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
    proc = demo("--cluster", "local", "--out", "/nonexistent/demo-out", prefix=prefix)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "needs root" in proc.stderr, proc.stderr


def write_run(tmp_path, readmit_at=42.0):
    """Samples of a run at 0.5 s: 2 rails at 100 Mbit/s each, rail 1 cut from +20 s to +40 s
    and re-admitted by the runtime at readmit_at (None: never); the operator calls the job
    healthy at +45 s."""
    t0, b0, b1, ops = 1000.0, 0.0, 0.0, 0
    lines = []
    for i in range(200):
        t = t0 + i * 0.5
        cut = t0 + 20 <= t and (readmit_at is None or t < t0 + readmit_at)
        lines.append(json.dumps({"t": t, "ops": ops, "bytes": {"r0": b0, "r1": b1},
                                 "state": {"r0": "healthy", "r1": "failed" if cut else "healthy"}}))
        b0 += 12.5e6 * 0.5 * (2 if cut else 1)
        b1 += 0 if cut else 12.5e6 * 0.5
        ops += 5
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "m.json").write_text(json.dumps({
        "train": t0, "cut": t0 + 20, "restore": t0 + 40, "job_healthy": t0 + 45, "end": t0 + 99.5,
        "phase": "Succeeded", "rate_mbit": 100, "cut_link": "nzr1", "cut_rail": "r1",
        "rails": ["r0", "r1"], "node": "n"}))
    return subprocess.run([sys.executable, str(STORY), "--samples", str(tmp_path / "s.jsonl"),
                           "--markers", str(tmp_path / "m.json"), "--png", str(tmp_path / "p.png")],
                          capture_output=True, text=True, timeout=120)


def row(out, phase):
    line = next(line for line in out.splitlines() if line.strip().startswith(phase))
    return [float(x) for x in line.split(")", 1)[1].split()[1:]]  # after the window: r0 r1 total steps/s


def test_story_reports_each_phase_per_rail_and_writes_a_png(tmp_path):
    proc = write_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert row(proc.stdout, "before") == [100, 100, 200, 10.0], proc.stdout
    assert row(proc.stdout, "during") == [200, 0, 200, 10.0], proc.stdout
    assert row(proc.stdout, "after") == [100, 100, 200, 10.0], proc.stdout
    assert "re-admitted by the runtime at 42.0 (2.0s after the link came back)" in proc.stdout
    assert "job marked healthy by the operator at 45.0 (5.0s after)" in proc.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_story_says_when_the_rail_never_came_back_and_exits_3(tmp_path):
    proc = write_run(tmp_path, readmit_at=None)
    assert proc.returncode == 3, proc.stderr
    assert "NOT re-admitted by the runtime" in proc.stdout, proc.stdout
    assert row(proc.stdout, "after")[:2] == [200, 0], proc.stdout
    assert (tmp_path / "p.png").exists()


def test_story_refuses_without_samples(tmp_path):
    (tmp_path / "s.jsonl").write_text("")
    (tmp_path / "m.json").write_text(json.dumps({"rails": ["r0"], "cut_rail": "r0"}))
    proc = subprocess.run([sys.executable, str(STORY), "--samples", str(tmp_path / "s.jsonl"),
                           "--markers", str(tmp_path / "m.json"), "--png", str(tmp_path / "p.png")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no throughput story" in proc.stderr, proc.stderr
