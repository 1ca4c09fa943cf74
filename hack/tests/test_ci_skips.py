"""The repository's conftest.py turns a skip into a failure under CI=true (and only then)."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, ci):
    d = tmp_path / "t"
    d.mkdir(parents=True)
    (d / "test_x.py").write_text(textwrap.dedent("""
        import pytest
        def test_needs_root():
            pytest.skip("needs root")
    """))
    # The repository's conftest.py is loaded as a plugin (the test file lives outside the tree).
    env = dict(os.environ, CI="true" if ci else "", PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "conftest", "-c", os.devnull, str(d)],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True)


def test_skip_fails_only_in_ci(tmp_path):
    laptop = _run(tmp_path / "a", ci=False)
    assert laptop.returncode == 0 and "1 skipped" in laptop.stdout, laptop.stdout
    ci = _run(tmp_path / "b", ci=True)
    assert ci.returncode == 1 and "skipped under CI=true" in ci.stdout, ci.stdout
