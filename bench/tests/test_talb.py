import pytest

from bench.harness import talb


def test_launch_value_is_slowest_rank_median():
    rows = [[{"t": 1.0}, {"t": 2.0}, {"t": 3.0}], [{"t": 2.0}, {"t": 4.0}, {"t": 9.0}]]
    assert talb.launch_value(rows, "t") == 4.0
    with pytest.raises(ValueError, match="first_needed_s"):
        talb.launch_value([[{"first_needed_s": 1.0}], []], "first_needed_s")


def test_judge():
    assert talb.judge(0.1, 0.4) == (0.25, "PASS")
    assert talb.judge(0.2, 0.4)[1] == "PASS"
    assert talb.judge(0.3, 0.4) == (pytest.approx(0.75), "MISS")
    assert talb.judge(None, 0.4) == (None, "NOT RUN")
    assert talb.judge(0.1, 0.0) == (None, "NOT RUN")
