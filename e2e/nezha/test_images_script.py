"""hack/images.sh refuses bad settings with a message naming the variable (no root, no cluster)."""

import os
import subprocess

import pytest

from product_helpers import IMAGES_SH


def images_sh(*args, **env):
    return subprocess.run([str(IMAGES_SH), *args], env={**os.environ, **env}, capture_output=True, text=True)


@pytest.mark.parametrize(
    "env, named",
    [
        ({"NEZHA_IMAGE_TAG": "bad tag"}, "NEZHA_IMAGE_TAG"),
        ({"NEZHA_IMAGE_PREFIX": "Nezha/Upper"}, "NEZHA_IMAGE_PREFIX"),
        ({"NEZHA_RUNTIME_BUILD": "/nonexistent-nze"}, "NEZHA_RUNTIME_BUILD"),
    ],
)
def test_bad_settings_are_refused_by_name(env, named, tmp_path):
    proc = images_sh(NEZHA_IMAGES_OUT=str(tmp_path), **env)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir()), "nothing is built when a setting is bad"


def test_unknown_argument_is_refused():
    proc = images_sh("--bogus")
    assert proc.returncode == 2 and "--bogus" in proc.stderr, proc.stderr


def test_list_names_three_tarballs(tmp_path):
    proc = images_sh("--list", NEZHA_IMAGES_OUT=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(tmp_path / f"{n}.tar") for n in ("operator", "rail-agent", "runtime")]


def test_train_example_without_the_torch_build_is_refused_by_name(tmp_path):
    proc = images_sh("train-example", NEZHA_IMAGES_OUT=str(tmp_path), NEZHA_TORCH_BUILD="/nonexistent-nze")
    assert proc.returncode != 0
    assert "NEZHA_TORCH_BUILD" in proc.stderr and "make build-torch" in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir()), "nothing is built when a setting is bad"


def test_list_train_example_names_its_tarball(tmp_path):
    proc = images_sh("--list-train-example", NEZHA_IMAGES_OUT=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(tmp_path / "train-example.tar")]
