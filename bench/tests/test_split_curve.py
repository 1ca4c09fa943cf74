"""Target D's judgement (harness/split_curve.py): candidate splits, the pinning table,
the best static split and the settle op of an adaptive curve. Pure functions."""

import pytest

from bench.harness.split_curve import (best_static, candidate_splits, judge_curve, neighbour_splits, per_op_median,
                                 pinned_ok, pinned_table, proportional, rolling_median, settle_op,
                                 split_distance, static_times, two_rail_sweep, verdict)


def test_two_rail_sweep_is_inclusive_and_sums_to_one():
    s = two_rail_sweep(0.60, 0.85, 0.05)
    assert [x[0] for x in s] == [0.6, 0.65, 0.7, 0.75, 0.8, 0.85]
    assert all(sum(x) == pytest.approx(1) for x in s)
    with pytest.raises(ValueError):
        two_rail_sweep(0.9, 0.6, 0.05)


def test_three_rails_sweep_the_neighbours_of_the_proportional_split():
    c = candidate_splits([600, 200, 400])
    assert c[0] == proportional([600, 200, 400]) == (0.5, 0.1667, 0.3333)
    assert len(c) == 7 and len(set(c)) == 7
    assert all(sum(x) == pytest.approx(1, abs=1e-3) for x in c)
    assert (0.55, 0.1167, 0.3333) in c and (0.45, 0.2167, 0.3333) in c
    # A donor that would drop below the floor gives nothing.
    assert len(neighbour_splits((0.9, 0.05, 0.05), 0.05)) == 1 + 2
    assert candidate_splits([800, 300])[0] == (0.6, 0.4)


def test_pinned_table_is_a_valid_single_entry_table():
    t = pinned_table(["r0", "r1"], 2, 16 << 20, (0.7, 0.3))
    assert t["format"] == "nezha-table/v1" and t["rails"] == ["r0", "r1"] and t["cold_threshold"] is None
    (e,) = t["entries"]
    assert e == {"op": "allreduce", "world_size": 2, "bucket_bytes": 16 << 20, "ratios": {"r0": 0.7, "r1": 0.3}}
    # The bucket is the power of two that starts the size's bucket (runtime sizeBucket).
    assert pinned_table(["a", "b"], 4, (16 << 20) + 5, (0.5, 0.5))["entries"][0]["bucket_bytes"] == 16 << 20
    with pytest.raises(ValueError):
        pinned_table(["r0"], 2, 1 << 20, (0.5, 0.5))


def test_pinned_ok_wants_every_op_on_the_pinned_split():
    assert pinned_ok([[0.7, 0.3], [0.7004, 0.2996]], (0.7, 0.3))
    assert not pinned_ok([[0.7, 0.3], [0.68, 0.32]], (0.7, 0.3))  # something re-tuned it
    assert not pinned_ok([], (0.7, 0.3))


def test_best_static_is_the_least_median_and_drops_warmup_ops():
    assert static_times([900e3, 500e3, 100e3, 110e3]) == [0.1, 0.11]
    times = {(0.6, 0.4): [0.20, 0.21, 0.22], (0.7, 0.3): [0.15, 0.30, 0.16], (0.8, 0.2): [0.17, 0.17, 0.18],
             (0.85, 0.15): []}
    assert best_static(times) == ((0.7, 0.3), 0.16)
    with pytest.raises(ValueError):
        best_static({(0.5, 0.5): []})


def test_rolling_median_is_trailing_with_full_windows_only():
    assert rolling_median([5, 1, 3, 9, 7], 3) == [None, None, 3, 3, 7]
    assert rolling_median([2.0], 1) == [2.0]


def test_settle_op_is_where_the_rolling_median_stays_within():
    best = 1.0
    # Learning for 10 ops (slow), then within 5 %; one outlier at op 20 does not move the median.
    times = [2.0] * 10 + [1.02] * 9 + [3.0] + [1.03] * 20
    assert settle_op(times, best) == 13  # ops 9..13: 2 slow, 3 within -> median within
    # A relapse later (three slow ops in a row) restarts the stretch after it.
    relapse = times[:30] + [1.2] * 3 + [1.0] * 10
    assert settle_op(relapse, best) == 36
    # Ending above the limit: never settled.
    assert settle_op([1.0] * 10 + [1.1] * 5, best) is None
    # Faster than the best static counts as within.
    assert settle_op([0.9] * 6, best) == 5
    assert settle_op([1.0] * 4, best) is None  # no full window


def test_judge_curve_ratios_and_split_distance():
    times = [2.0] * 10 + [1.0] * 50
    splits = [[0.5, 0.5]] * 10 + [[0.72, 0.28]] * 50
    j = judge_curve(times, splits, 1.0, (0.7, 0.3))
    assert j["settle_op"] == 13 and j["within_by_goal"]
    assert j["ratio_at_goal"] == pytest.approx(1.0) and j["ratio_at_end"] == pytest.approx(1.0)
    assert j["distance_at_end"] == pytest.approx(0.02)
    late = judge_curve([2.0] * 55 + [1.0] * 25, [[0.5, 0.5]] * 80, 1.0, (0.7, 0.3))
    assert late["settle_op"] == 58 and not late["within_by_goal"] and late["ratio_at_goal"] == pytest.approx(2.0)
    assert late["distance_at_goal"] == pytest.approx(0.2)


def test_split_distance_is_total_variation():
    assert split_distance((0.7, 0.3), (0.75, 0.25)) == pytest.approx(0.05)
    assert split_distance((0.5, 0.2, 0.3), (0.4, 0.3, 0.3)) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        split_distance((1.0,), (0.5, 0.5))


def test_per_op_median_and_verdict():
    assert per_op_median([[1, 5, 3], [2, 4], [3, 6, 9]]) == [2, 5]
    assert verdict([12, 40]) == "PASS"
    assert verdict([12, 51]) == "MISS"
    assert verdict([12, None]) == "MISS"
    assert verdict([]) == "NOT RUN"
