"""`hack/images.sh push` (`make push`) against a real registry on loopback: crane's own
`registry serve` (the pinned crane from hack/setup.sh), in memory, on 127.0.0.1 with a port the
kernel picks. Small stand-in tarballs from hack/imagebuilder replace the three real images (building
those needs the whole runtime); the push path is the same.

Run: /usr/bin/python3 -m pytest -q hack/tests/test_images_push.py
"""

import os
import re
import subprocess
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES_SH = os.path.join(REPO, "hack", "images.sh")
NAMES = ("operator", "rail-agent", "runtime")


def crane_path():
    out = subprocess.run(["bash", "-c", f'source "{REPO}/hack/versions.sh"; echo "$NEZHA_TOOLS_BIN/crane-$CRANE_VERSION"'],
                         capture_output=True, text=True, check=True).stdout.strip()
    if not os.access(out, os.X_OK):
        pytest.skip(f"{out} is missing (run hack/setup.sh)")
    return out


@pytest.fixture
def registry():
    crane = crane_path()
    proc = subprocess.Popen([crane, "registry", "serve", "--address", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:  # "... serving on port N" once it listens
            m = re.search(r"serving on port (\d+)", line)
            if m:
                port = m.group(1)
                break
        assert port, "crane registry serve did not say where it listens"
        yield crane, f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def tarballs(tmp_path):
    builder = tmp_path / "imagebuilder"
    subprocess.run(["go", "build", "-o", str(builder), "./hack/imagebuilder"], cwd=REPO, check=True)
    out = tmp_path / "images"
    out.mkdir()
    for name in NAMES:
        content = tmp_path / f"{name}.txt"
        content.write_text(f"stand-in for the {name} image\n")
        subprocess.run([str(builder), "--tag", f"nezha/{name}:0", "--output", str(out / f"{name}.tar"),
                        "--file", f"{content}:/{name}.txt"], check=True, capture_output=True)
    return out


def push(out, prefix, tag="t1"):
    env = dict(os.environ, NEZHA_IMAGES_OUT=str(out), NEZHA_IMAGE_PREFIX=prefix, NEZHA_IMAGE_TAG=tag)
    return subprocess.run([IMAGES_SH, "push"], env=env, capture_output=True, text=True)


def test_push_prints_digests_the_registry_serves(registry, tarballs, tmp_path):
    crane, host = registry
    proc = push(tarballs, f"{host}/team/nezha")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    assert (tarballs / "digests.txt").read_text().splitlines() == lines
    for name, line in zip(NAMES, lines):
        ref, digest = line.split()
        assert ref == f"{host}/team/nezha/{name}:t1"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
        # The registry serves that tag at that digest, and the image holds the tarball's layer.
        served = subprocess.run([crane, "digest", ref], capture_output=True, text=True, check=True).stdout.strip()
        assert served == digest
        fs = tmp_path / f"{name}-fs.tar"
        subprocess.run([crane, "export", f"{ref.rsplit(':', 1)[0]}@{digest}", str(fs)], check=True)
        with tarfile.open(fs) as t:
            member = t.extractfile(f"{name}.txt")
            assert member is not None and member.read() == f"stand-in for the {name} image\n".encode()


@pytest.mark.parametrize("prefix", ["nezha", "team/nezha"])
def test_push_without_a_registry_host_is_refused(prefix, tmp_path):
    proc = push(tmp_path, prefix)
    assert proc.returncode == 2 and "REGISTRY" in proc.stderr, proc.stderr


def test_push_of_missing_tarballs_names_make_images(registry, tmp_path):
    _, host = registry
    proc = push(tmp_path, f"{host}/nezha")
    assert proc.returncode == 1 and "make images" in proc.stderr, proc.stderr
