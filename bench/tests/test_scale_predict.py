"""The scale prediction's pure parts: the latency extrapolation and the README block writer."""
import pytest

from bench.harness.readme_block import markers, rewrite_block
from bench.sim.scale_predict import alpha_at, alpha_power_law


def test_power_law_recovers_an_exact_one():
    law = alpha_power_law({2: 50e-6, 4: 50e-6 * 2 ** 1.5, 8: 50e-6 * 4 ** 1.5})
    assert law[0] == pytest.approx(50e-6)
    assert law[1] == pytest.approx(1.5)
    assert alpha_at(law, 64) == pytest.approx(50e-6 * 32 ** 1.5)


def test_power_law_needs_two_points():
    with pytest.raises(ValueError, match="alpha_by_ranks"):
        alpha_power_law({2: 50e-6})


def test_block_is_rewritten_between_its_markers(tmp_path):
    begin, end = markers("x", "gen.py")
    p = tmp_path / "README.md"
    p.write_text(f"head\n{begin}\nold\n{end}\ntail\n")
    rewrite_block(str(p), "x", "gen.py", "new\n")
    assert p.read_text() == f"head\n{begin}\nnew\n{end}\ntail\n"


def test_missing_block_is_an_error(tmp_path):
    p = tmp_path / "README.md"
    p.write_text("no block\n")
    with pytest.raises(ValueError, match="no generated-results block"):
        rewrite_block(str(p), "x", "gen.py", "new")
