"""hack/kind.sh and hack/kind-sandbox/node-image.sh: bad input gets a clear error naming the knob,
before anything is built or created (no Docker needed for these).

Run: /usr/bin/python3 -m pytest -q hack/tests/test_kind_script.py
"""

import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIND_SH = os.path.join(REPO, "hack", "kind.sh")
NODE_IMAGE_SH = os.path.join(REPO, "hack", "kind-sandbox", "node-image.sh")


def run(args, **env):
    return subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, **env), timeout=120)


@pytest.mark.parametrize("knob,value", [
    ("NEZHA_KIND_NAME", "Bad_Name"),
    ("NEZHA_KIND_RAILS", "0"),
    ("NEZHA_KIND_RAILS", "five"),
    ("NEZHA_KIND_RAIL_NET", "10.1.2"),
    ("NEZHA_KIND_SANDBOX", "yes"),
])
def test_bad_knob_is_named(knob, value):
    proc = run([KIND_SH, "up"], **{knob: value})
    assert proc.returncode == 2, proc
    assert knob in proc.stderr and value in proc.stderr, proc.stderr


def test_unknown_command_is_refused():
    proc = run([KIND_SH, "sideways"])
    assert proc.returncode == 2 and "unknown command 'sideways'" in proc.stderr, proc.stderr


def test_load_image_names_what_is_missing(tmp_path):
    proc = run([KIND_SH, "load-image"])
    assert proc.returncode == 2 and "load-image: want a TARFILE" in proc.stderr, proc.stderr
    missing = str(tmp_path / "nope.tar")
    proc = run([KIND_SH, "load-image", missing])
    assert proc.returncode == 1 and f"load-image: no such file: {missing}" in proc.stderr, proc.stderr


def test_status_says_down_for_a_cluster_that_does_not_exist():
    proc = run([KIND_SH, "status"], NEZHA_KIND_NAME="nezha-test-never-made")
    assert proc.returncode == 0 and proc.stdout == "down\n", proc


def test_no_command_prints_usage():
    proc = run([KIND_SH])
    assert proc.returncode == 2 and "hack/kind.sh up" in proc.stderr, proc.stderr


def test_node_image_ref_names_the_kubernetes_version_and_is_stable():
    first = run([NODE_IMAGE_SH, "--ref"])
    second = run([NODE_IMAGE_SH, "--ref"])
    assert first.returncode == 0, first.stderr
    version = run(["bash", "-c", f'source "{REPO}/hack/versions.sh"; echo "$KUBE_VERSION"']).stdout.strip()
    assert re.fullmatch(rf"nezha\.local/kind-node:{re.escape(version)}-[0-9a-f]{{12}}\n", first.stdout), first.stdout
    assert first.stdout == second.stdout


def test_node_image_refuses_unknown_arguments():
    proc = run([NODE_IMAGE_SH, "--fast"])
    assert proc.returncode == 2 and "unknown argument '--fast'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["maybe", "yes", "", "auto 1"])
def test_make_e2e_refuses_a_bad_E2E_KIND_before_building(value):
    # Checked when the Makefile is read: nothing is built, with -j too.
    proc = run(["make", "-C", REPO, "--no-print-directory", "-j2", "e2e", f"E2E_KIND={value}"])
    assert proc.returncode == 2, proc
    assert f"E2E_KIND must be auto, 1 or 0, not '{value}'" in proc.stderr, proc.stderr
    assert "go build" not in proc.stdout and "cmake" not in proc.stdout, proc.stdout
