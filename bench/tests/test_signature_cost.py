import pytest

from bench.harness import signature_cost as sc


def test_trimmed_mean_drops_the_slowest_two_percent():
    times = [1.0] * 98 + [100.0, 100.0]
    assert sc.trimmed_mean(times) == 1.0


def test_slowest_rank_and_ratio():
    row = sc.size_ratio([{"on": [2.0], "off": [1.0]}, {"on": [3.0], "off": [2.0]}])
    assert row == {"on_s": 3.0, "off_s": 2.0, "ratio": 1.5}


def test_judge_per_band():
    rows = {"1024": {"ratio": 1.04}, "65536": {"ratio": 1.02}, "1048576": {"ratio": 1.02},
            "4194304": {"ratio": 1.0}, "262144": {"ratio": 9.0}}  # 256K: in no band
    out = sc.judge(rows)
    assert out["small"]["verdict"] == "PASS" and out["small"]["worst_size"] == 1024
    assert out["large"]["verdict"] == "MISS" and out["large"]["worst_size"] == 1048576
    assert sc.judge({})["large"]["verdict"] == "NOT RUN"


def test_both_orders_cancel_a_first_group_factor():
    # The same cost (3 %) measured with the first group 8 % slower, once on each side.
    checked_first = {"on_s": 1.03 * 1.08, "off_s": 1.0, "ratio": 1.03 * 1.08}
    unchecked_first = {"on_s": 1.03, "off_s": 1.08, "ratio": 1.03 / 1.08}
    row = sc.both_orders(checked_first, unchecked_first)
    assert row["ratio"] == pytest.approx(1.03)
    assert row["checked_first"] is checked_first and row["unchecked_first"] is unchecked_first
