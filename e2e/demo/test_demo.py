"""`make demo` end to end (`make test-demo`; the cluster hack/demo.sh picks: kind where Docker
answers, the local cluster (root) otherwise, or DEMO_CLUSTER=kind|local): hack/demo.sh brings the
cluster up (or uses a running one), installs the chart, trains a MultiRailJob on two rails through
a rail cut (examples/train_cnn.py, torch backend "nezha", image nezha/train-example), prints its
story and plot, and takes the cluster down again if it brought it up. Checks what the story claims
against the files the demo leaves in --out."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def story_row(story, phase):
    line = next(line for line in story.splitlines() if line.strip().startswith(phase))
    return [float(x) for x in line.split(")", 1)[1].split()[1:]]  # r0 r1 total steps/s


def test_demo_runs_end_to_end(tmp_path):
    if os.geteuid() != 0 and os.environ.get("DEMO_CLUSTER") != "kind":
        pytest.skip("the demo needs root on the local cluster (DEMO_CLUSTER=kind does not)")
    out = tmp_path / "demo"
    proc = subprocess.run([str(REPO / "hack" / "demo.sh"), "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
    stdout = proc.stdout

    # kubectl get mrj before/during/after: Running, then Degraded with 1/2 rails, then Running.
    def snapshot(label):
        block = stdout.split(f"# {label}", 1)[1].splitlines()
        return block[2]  # the line after kubectl's header
    assert snapshot("before").split()[1] == "Running", stdout
    assert snapshot("during").split()[1] == "Degraded" and "1/2" in snapshot("during").split(), stdout
    assert snapshot("after").split()[1] == "Running", stdout

    # The events name the rail lost and recovered.
    assert "RailLost" in stdout and "RailRecovered" in stdout, stdout

    markers = json.loads((out / "markers.json").read_text())
    assert markers["phase"] == "Succeeded"
    assert markers["train"] < markers["cut"] < markers["restore"] < markers["job_healthy"] < markers["end"]
    story = (out / "story.txt").read_text()
    before, during, after = (story_row(story, p) for p in ("before", "during", "after"))
    # Both rails carry data before and after; during the cut the cut rail carries nothing and the
    # training goes on over the other one.
    assert before[0] > 0 and before[1] > 0, story
    assert during[1] == 0 and during[0] > 0 and during[3] > 0, story
    assert after[0] > 0 and after[1] > 0, story
    assert (out / "demo-throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The model trained through the cut: both ranks report the same number of steps, the same
    # final loss and bit-identical parameters (DDP replicas), and the loss went down.
    finals = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert sorted(f["rank"] for f in finals) == [0, 1], finals
    assert len({(f["steps"], f["loss"], f["params"]) for f in finals}) == 1, finals
    rank0 = (out / "rank0.log").read_text()
    losses = json.loads(next(line for line in rank0.splitlines() if line.startswith("LOSSES "))[7:])
    assert len(losses) == finals[0]["steps"] and losses[-1] == finals[0]["loss"]
    assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])
