"""The host-default targets: judging one pass from its runs' documents, and the side-by-side report."""

import pytest

from bench.harness import targets_report
from bench.harness.targets import TARGETS, judge_pass, source_info

M, K = 1 << 20, 1 << 10


def rows(algbw_by_size, **extra):
    return [{"bytes": b, "algbw_gbps": v, "check": "ok", **extra} for b, v in algbw_by_size.items()]


def scenario(name, sizes, adaptive, single, gloo, iperf, paired=1.0):
    # paired: the best single rail's trimmed time over adaptive's, same launch (> 1: adaptive faster)
    return {"name": name, "sizes": sizes, "series": {
        "nezha-adaptive": {"results": rows({b: adaptive for b in sizes}, paired_speedup=paired)},
        "nezha-single": {"results": rows({b: single for b in sizes})},
        "gloo-best-rail": {"results": rows({b: gloo for b in sizes})},
        "ceiling-iperf": {"results": rows({b: iperf for b in sizes})}}}


SIZES = [4 * K, 256 * K, 4 * M, 16 * M]


def suite(same_rail=1.06, paired=1.0, random_sum=0.98, cc="bbr"):
    return {"started": "2026-11-29T01:00:00+00:00",
            "hardware": {"tcp_congestion_control": cc, "loadavg_start": [1.0, 0.5, 0.2],
                         "loadavg_end": [0.8, 0.6, 0.3]},
            "scenarios": [scenario("homogeneous", SIZES, 0.12, 0.06, 0.06 / same_rail, 0.12, paired),
                          scenario("random1", SIZES, random_sum * 0.1, 0.05, 0.05 / same_rail, 0.1, paired)]}


def fault_series(stall=0.1, worst=0.3, during=0.09, back=0.6):
    return {"metrics": {"failed": False, "stall_s": stall, "stall_after_link_event_s": 0.0,
                        "worst_gap_excess_s": worst, "algbw_during_cut_gbps": during,
                        "share_back_after_restore_s": back}}


def faults(gray_back=0.6):
    control = fault_series(during=0.09)
    return {"hardware": {"tcp_congestion_control": "bbr"}, "chaos": {
        "series": {"nezha-adaptive": fault_series(), "gloo-best-rail": control},
        "faults": {"blackhole": {"series": {"gloo-best-rail": control}},
                   "gray": {"series": {"nezha-adaptive": fault_series(back=gray_back), "gloo-best-rail": control}}}}}


def unshaped(nezha_cyc=1.0, gloo_cyc=1.5):
    cells = {n: {str(s): {"cycles_per_byte": c} for s in (64 * K, M)}
             for n, c in (("nezha-adaptive", nezha_cyc), ("gloo-best-rail", gloo_cyc))}
    return {"args": {"sizes": [64 * K, M]}, "cells": cells,
            "profile": {"size": 16 * M, "rank": 0, "series": {"nezha-adaptive": {
                "buckets": {"copies": 40.0, "reductions": 20.0, "kernel (syscalls, TCP/IP, scheduling)": 30.0,
                            "user other": 10.0}, "top": [[25.0, "copy_user_generic_string", "copies"]]}}}}


def test_every_target_of_a_full_pass_is_judged_from_its_source():
    got = judge_pass({"suite": suite(), "faults": faults(), "unshaped": unshaped(),
                      "ddp": {"goal": {"value": 0.55}}})
    assert set(got) == {t.id for t in TARGETS}
    for tid in ("sum-random", "equal-rails", "same-rail-large", "same-rail-mid", "latency", "cut-stall",
                "cut-pace", "cut-share-back", "gray-stall", "gray-share-back", "cpu-per-byte", "ddp-step"):
        assert got[tid]["status"] == "PASS", (tid, got[tid])
    assert got["sum-random"]["value"] == "0.980x at random1 16M"
    assert got["cpu-per-byte"]["value"] == "1.50x at 64K"
    assert got["ddp-step"]["value"] == "0.550x"
    # The black hole's Nezha series has no trace here: its rows are not measured, not passed.
    assert got["hole-stall"]["status"] == "INCOMPLETE"


def test_the_targets_thresholds_decide():
    got = judge_pass({"suite": suite(same_rail=1.03, paired=1 / 1.03, random_sum=0.96), "faults": faults(1.2),
                      "unshaped": unshaped(nezha_cyc=1.2), "ddp": {"goal": {"value": 0.61}}})
    # 1.03x Gloo on the same rail passes >= 1.0 at >= 1M but not >= 1.05 at 64K-512K.
    assert got["same-rail-large"]["status"] == "PASS" and got["same-rail-mid"]["status"] == "MISS"
    assert got["latency"]["status"] == "MISS"  # 1.03x time > 1.02
    assert got["sum-random"]["status"] == "MISS"
    assert got["gray-share-back"]["status"] == "MISS" and got["gray-share-back"]["value"] == "1.200 s"
    assert got["cpu-per-byte"]["status"] == "MISS"  # 1.5 / 1.2 = 1.25 < 1.3
    assert got["ddp-step"]["status"] == "MISS"


def test_a_missing_run_is_not_run_never_a_pass():
    got = judge_pass({"suite": None, "faults": None, "unshaped": None, "ddp": None})
    assert {c["status"] for c in got.values()} == {"NOT RUN"}
    no_mix = suite()
    no_mix["scenarios"] = no_mix["scenarios"][:1]
    assert judge_pass({"suite": no_mix})["sum-random"]["status"] == "NOT RUN"
    with pytest.raises(ValueError, match="unknown sources"):
        judge_pass({"suites": None})


def test_source_info_names_the_congestion_control_and_load():
    info = source_info("suite", suite())
    assert info["tcp_congestion_control"] == "bbr" and info["loadavg_start"] == [1.0, 0.5, 0.2]
    assert source_info("ddp", {"host": {"tcp_congestion_control": "reno"}})["tcp_congestion_control"] == "reno"
    assert source_info("ddp", None) == {"source": "ddp", "ran": False}


def test_report_puts_the_passes_side_by_side_with_their_runs():
    doc = targets_report.build([
        {"label": "host default", "cc": "bbr", "docs": {"suite": suite(), "faults": faults(), "unshaped": unshaped(),
                                                        "ddp": None}},
        {"label": "reno", "cc": "reno", "docs": {"suite": suite(same_rail=1.0, cc="reno")}, "note": "trimmed"}])
    text = targets_report.text(doc)
    head = next(line for line in text.splitlines() if line.startswith("goal"))
    assert "host default (bbr)" in head and "reno" in head
    row = next(line for line in text.splitlines() if line.startswith("one rail / Gloo on the same rail, 64K"))
    assert "1.060x at homogeneous 256K PASS" in row and "1.000x at homogeneous 256K MISS" in row
    assert "host default (bbr), suite: started 2026-11-29T01:00:00+00:00, bed's congestion control bbr, " \
           "load average 1.00, 0.50, 0.20 at start, 0.80, 0.60, 0.30 at end" in text
    assert "reno, ddp: not run" in text and "note (reno): trimmed" in text
    assert "copies 40 %, reductions 20 %" in text
    md = targets_report.markdown(doc)
    assert "| goal | target | host default (bbr) | reno |" in md
    assert md.count("\n| ") == len(TARGETS) + 1  # the header and one row per target


def test_readme_block_is_rewritten_in_place(tmp_path):
    readme = tmp_path / "README.md"
    begin, end = (f"<!-- bench-targets:begin (generated by {targets_report.GENERATOR}; do not edit) -->",
                  "<!-- bench-targets:end -->")
    readme.write_text(f"head\n{begin}\nold\n{end}\ntail\n")
    doc = targets_report.build([{"label": "reno", "cc": "reno", "docs": {}}])
    targets_report.update_readme(str(readme), doc)
    out = readme.read_text()
    assert out.startswith("head\n") and out.endswith("tail\n") and "old" not in out and "| goal |" in out
