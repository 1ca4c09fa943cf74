"""The hand-split baseline's pure parts: which static splits are tried, the best of them per size,
how gloo-bench is launched for one, and the goal it feeds (no root, no network)."""

import pytest

from bench.harness import hand_split
from bench.harness.config import Scenario
from bench.harness.goals import MISS, NOT_RUN, PASS, evaluate_all
from bench.harness.ratios import compute_ratios
from bench.harness.report import summary_text
from bench.harness.series import SERIES, make_launch
from bench.harness.sizes import Band

SPEC = {s.name: s for s in SERIES}["gloo-hand-split"]


def test_candidates_center_on_rate_proportion_and_move_fastest_share():
    splits = hand_split.candidate_splits([800, 300], fastest=0)
    assert splits == [(0.727, 0.273), (0.707, 0.293), (0.747, 0.253), (0.677, 0.323), (0.777, 0.223)]
    for s in splits:
        assert sum(s) == pytest.approx(1.0, abs=1e-9)


def test_candidates_use_measured_rates_not_tbf():
    # iperf3 gets less than TBF on the fast rail: the centre follows the measurement.
    assert hand_split.candidate_splits([700.0, 300.0], fastest=0)[0] == (0.7, 0.3)


def test_three_rails_keep_the_slow_rails_proportion():
    splits = hand_split.candidate_splits([200, 250, 450], fastest=2)
    assert splits[0] == (0.222, 0.278, 0.5)
    for s in splits[1:]:
        assert s[0] / s[1] == pytest.approx(200 / 250, rel=0.01)  # the other two keep 4:5
        assert sum(s) == pytest.approx(1.0, abs=1e-9)
    assert {round(s[2] - 0.5, 3) for s in splits} == {0.0, -0.02, 0.02, -0.05, 0.05}


def test_clipping_keeps_every_share_and_drops_duplicates():
    # 800/25: the slow rail has 0.030; +0.02 and +0.05 would leave it below MIN_SHARE, so both
    # clip to the same split, kept once.
    splits = hand_split.candidate_splits([800, 25], fastest=0)
    assert all(min(s) >= hand_split.MIN_SHARE for s in splits)
    assert len(splits) == len(set(splits)) == 4
    assert max(s[0] for s in splits) == pytest.approx(1 - hand_split.MIN_SHARE)


def test_proportional_rejects_bad_rates():
    with pytest.raises(ValueError, match="positive rail rates"):
        hand_split.proportional([500, 0])


def test_applies_to_two_or_more_rails_and_big_sizes_only():
    assert hand_split.applies(Scenario("x", (500, 500)))
    assert not hand_split.applies(Scenario("x", (500,)))
    bands = [Band(1024, 64 << 10, 5, 30, 3), Band(8 << 20, 32 << 20, 2, 5), Band(64 << 20, 256 << 20, 1, 3)]
    assert [b.label() for b in hand_split.bands_for(bands)] == ["16M-32M", "64M-256M"]
    assert hand_split.bands_for(bands[:1]) == []


def rows(values, check="ok"):
    return [{"bytes": b, "algbw_gbps": v, "time_us": 1.0, "check": check} for b, v in values.items()]


def test_best_of_picks_fastest_split_per_size_and_records_it():
    a, b = (0.727, 0.273), (0.677, 0.323)
    best = hand_split.best_of([(a, rows({16 << 20: 0.10, 32 << 20: 0.12})),
                               (b, rows({16 << 20: 0.11, 32 << 20: 0.115}))])
    assert [r["bytes"] for r in best] == [16 << 20, 32 << 20]
    assert best[0]["algbw_gbps"] == 0.11 and best[0]["best_split"] == list(b)
    assert best[1]["algbw_gbps"] == 0.12 and best[1]["best_split"] == list(a)
    assert best[0]["best_of"] == 2
    assert [c["algbw_gbps"] for c in best[0]["candidates"]] == [0.10, 0.11]


def test_best_of_skips_failed_checks_and_ties_go_to_the_earlier_split():
    a, b, c = (0.5, 0.5), (0.45, 0.55), (0.55, 0.45)
    best = hand_split.best_of([(a, rows({16 << 20: 0.1})), (b, rows({16 << 20: 0.5}, check="failed")),
                               (c, rows({16 << 20: 0.1}))])
    assert best[0]["best_split"] == list(a) and best[0]["check"] == "ok"
    assert best[0]["candidates"][1]["algbw_gbps"] is None


def test_best_of_keeps_a_size_no_split_measured_as_failed():
    best = hand_split.best_of([((0.5, 0.5), rows({16 << 20: 0.2}, check="failed")),
                               ((0.6, 0.4), rows({32 << 20: 0.3}))])
    assert best[0]["check"] == "failed" and best[0]["best_split"] is None
    assert best[1]["best_split"] == [0.6, 0.4]
    # the failed size gives no ratio, never a guess
    r = compute_ratios({"nezha-adaptive": rows({16 << 20: 0.2, 32 << 20: 0.3}), "gloo-hand-split": best},
                       [16 << 20, 32 << 20])
    assert [x["ratio"] for x in r["nezha/gloo-hand-split"]] == [None, pytest.approx(1.0)]


def test_launch_passes_every_rail_and_the_split():
    lc = make_launch(SPEC, Scenario("r", (200, 250, 450), 3), 3, "/t/gloo-bench", Band(16 << 20, 32 << 20, 1, 2),
                     1, "/w/x.json", True, "/w/store", "", split=(0.222, 0.278, 0.5))
    argv = lc.argv(1)
    assert argv[argv.index("--iface") + 1] == "r0,r1,r2"
    assert argv[argv.index("--split") + 1] == "0.222,0.278,0.500"
    assert argv[argv.index("--rank") + 1] == "1" and "--rail-name" not in argv and "--check" in argv
    assert lc.env(1) == {}
    bad = make_launch(SPEC, Scenario("r", (200, 250)), 2, "/t", Band(16 << 20, 16 << 20, 1, 1), 1, "/w/x", True,
                      "/w/s", "", split=(1.0,))
    with pytest.raises(ValueError, match="one share per rail"):
        bad.argv(0)


def _scen_ratios(nezha, hand):
    sizes = [1 << 10, 16 << 20, 32 << 20]
    return compute_ratios({"nezha-adaptive": rows(dict(zip(sizes, nezha))),
                           "gloo-hand-split": hand_split.best_of([((0.7, 0.3), rows(dict(zip(sizes[1:], hand))))])},
                          sizes)


def test_goal_i18_hand_split_is_judged_when_the_series_ran():
    goals = {g["id"]: g for g in evaluate_all({"random1": _scen_ratios([0.01, 0.98, 0.99], [1.0, 1.0])})}
    assert goals["i18-hand-split"]["status"] == PASS  # 1 KiB has no hand split: out of scope
    assert goals["i18-hand-split"]["worst"] == pytest.approx(0.98)
    goals = {g["id"]: g for g in evaluate_all({"random1": _scen_ratios([0.01, 0.96, 0.99], [1.0, 1.0])})}
    assert goals["i18-hand-split"]["status"] == MISS and goals["i18-hand-split"]["worst_at"] == "random1 16M"
    # without the series (e.g. --series without it) it stays NOT RUN, never PASS
    goals = {g["id"]: g for g in evaluate_all({"random1": compute_ratios({}, [16 << 20])})}
    assert goals["i18-hand-split"]["status"] == NOT_RUN


def test_summary_text_names_the_splits_tried_and_the_winner_per_size():
    best = hand_split.best_of([((0.727, 0.273), rows({16 << 20: 0.10})), ((0.677, 0.323), rows({16 << 20: 0.11}))])
    series = {"name": "gloo-hand-split", "status": "ok", "runs": [], "results": best, "rails_order": "r0/r1",
              "proportion_source": "iperf3 together",
              "candidates": [{"split": [0.727, 0.273]}, {"split": [0.677, 0.323]}]}
    doc = {"mode": "full", "ranks": 4, "started": "t", "hardware": {"cpu_model": "c", "cores": 2, "kernel": "k",
                                                                     "setup": "s", "loadavg_start": [1, 1, 1]},
           "scenarios": [{"name": "random1", "rates_mbit": [800, 300], "best_rail": 0, "ceiling_algbw_gbps": 0.1,
                          "sizes": [16 << 20], "series": {"gloo-hand-split": series},
                          "ratios": compute_ratios({"gloo-hand-split": best}, [16 << 20])}]}
    text = summary_text(doc)
    assert "static splits tried (r0/r1 shares, around iperf3 together rates): 0.727/0.273, 0.677/0.323" in text
    assert "best static split per size: 16M 0.677/0.323 (+10.0% over the next)" in text
    assert "nezha/gloo-hand-split" in text


def test_dry_run_plan_shows_the_splits_and_counts_their_launches():
    from bench import run_bench
    from bench.harness.config import load_tunables

    tun = load_tunables()
    a = run_bench.parse_args(["--scenario", "heterogeneous", "--min-bytes", "16M", "--max-bytes", "64M"])
    plan = run_bench.hand_split_plan(a)
    assert "gloo-hand-split on 16M-32M, 64M-64M" in plan
    assert "heterogeneous 0.727/0.273, 0.707/0.293, 0.747/0.253, 0.677/0.323, 0.777/0.223" in plan
    without = run_bench.parse_args(["--scenario", "heterogeneous", "--min-bytes", "16M", "--max-bytes", "64M",
                                    "--series", "gloo-best-rail"])
    assert run_bench.hand_split_plan(without) == ""
    # the hand split costs five launches per band, more than the one-rail Gloo series it is added to
    assert run_bench.estimate_seconds(a, tun) > run_bench.estimate_seconds(without, tun)
    small = run_bench.parse_args(["--scenario", "heterogeneous", "--max-bytes", "8M"])
    assert "gloo-hand-split: not run (no size >= 16M)" in run_bench.hand_split_plan(small)


def test_launch_files_of_a_split_are_plain_names(stopped_launch):
    """The tag of a hand-split launch names rank logs and JSON files: no '/' from the split."""
    seen = stopped_launch(Scenario("random1", (100, 600)), SPEC, Band(16 << 20, 32 << 20, 2, 5), 0, (0.143, 0.857))
    assert seen["tag"] == "random1.gloo-hand-split.16M-32M.split0.143-0.857" and "/" not in seen["tag"]
