"""Tests for check_layers.py: the real tree passes, a planted upward include fails by file and line."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "src"))
CHECK = os.path.join(HERE, "check_layers.py")

_spec = importlib.util.spec_from_file_location("check_layers", CHECK)
check_layers = importlib.util.module_from_spec(_spec)  # a script beside this test, not a package
_spec.loader.exec_module(check_layers)


def run(*args):
    return subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True)


def test_the_real_tree_follows_its_table():
    r = run()
    assert r.returncode == 0, r.stderr


@pytest.fixture
def tree(tmp_path):
    """A copy of runtime/src to plant includes in."""
    dst = tmp_path / "src"
    shutil.copytree(SRC, dst)
    return dst


def plant(tree, rel, text):
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    return path


def test_an_upward_include_is_named_by_file_and_line(tree):
    path = plant(tree, "base/planted.h", '#pragma once\n\n#include "comm/config.h"\n')
    r = run("--src", str(tree))
    assert r.returncode == 1
    assert f"runtime/src/base/planted.h:3: #include \"comm/config.h\"" in r.stderr
    assert "room 'base/' may not include 'comm/'" in r.stderr
    path.unlink()
    assert run("--src", str(tree)).returncode == 0


def test_a_sideways_include_not_in_the_row_fails(tree):
    # control/ may include bootstrap/ and base/ only; the failover engine is not its business.
    plant(tree, "control/planted.cc", '#include "base/error.h"\n#include "schedule/split.h"\n')
    r = run("--src", str(tree))
    assert r.returncode == 1
    assert "runtime/src/control/planted.cc:2:" in r.stderr
    assert "base/error.h" not in r.stderr


def test_own_room_public_and_system_headers_are_allowed(tree):
    plant(tree, "base/planted.cc", '#include <vector>\n#include "nezha/nezha.hpp"\n#include "planted.h"\n'
          '#include "base/error.h"\n')
    assert run("--src", str(tree)).returncode == 0


def test_a_folder_missing_from_the_table_fails(tree):
    plant(tree, "extra/thing.cc", "int x;\n")
    r = run("--src", str(tree))
    assert r.returncode == 1
    assert "room 'extra/' is not in the rooms table" in r.stderr


def test_a_table_naming_an_unknown_room_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("| room | what | may include |\n|---|---|---|\n| `a/` | x | `b/` |\n")
    with pytest.raises(check_layers.TableError, match="'a/' may include b/"):
        check_layers.read_table(str(readme))


def test_no_table_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# nothing here\n")
    r = run("--src", str(tmp_path), "--readme", str(readme))
    assert r.returncode == 2
    assert "no rooms table" in r.stderr
