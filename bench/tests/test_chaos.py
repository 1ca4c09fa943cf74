import pytest

from bench.harness.chaos import analyze, validate_trace

T0 = 1000.0


def trace(ends, dur_us=100_000, error=None, nbytes=1 << 20):
    return {"bytes": nbytes, "start_unix": T0, "ops": [[T0 + e, dur_us] for e in ends], "error": error}


def test_steady_run_through_cut_has_no_stall():
    ends = [0.1 * i for i in range(1, 301)]  # 10 ops/s for 30 s
    m = analyze(trace(ends), T0 + 10, T0 + 20, T0 + 30)
    assert m["survived"] and not m["failed"]
    assert m["stall_s"] == pytest.approx(0.0, abs=1e-6)
    assert m["algbw_during_cut_gbps"] == pytest.approx(10 * (1 << 20) / 1e9, rel=0.05)
    assert m["algbw_before_gbps"] == pytest.approx(10 * (1 << 20) / 1e9, rel=0.05)


def test_jitter_after_the_in_flight_op_is_not_its_stall():
    # The op in flight ends on time; a later op is slow. stall_s (the op in flight) stays 0, the
    # longest gap in the window shows the later one.
    ends = [1.0 * i for i in range(1, 11)] + [11.0, 13.0] + [13.0 + i for i in range(1, 10)]
    t = {"bytes": 1, "start_unix": T0, "error": None, "ops": [[T0 + e, 1_000_000] for e in ends]}
    m = analyze(t, T0 + 10.5, None, T0 + 22.0)
    assert m["stall_s"] == pytest.approx(0.0)
    assert m["worst_gap_excess_s"] == pytest.approx(1.0)


def test_stall_then_slower_progress():
    before = [0.1 * i for i in range(1, 101)]  # up to t=10.0
    after = [12.0 + 0.2 * i for i in range(0, 40)]  # 2 s stall, then half speed
    m = analyze(trace(before + after), T0 + 10.0, T0 + 20.0, T0 + 30.0)
    assert m["stall_s"] == pytest.approx(2.0 - 0.1, abs=1e-6)
    assert m["first_op_after_cut_s"] == pytest.approx(2.0)
    assert m["algbw_during_cut_gbps"] == pytest.approx(5 * (1 << 20) / 1e9, rel=0.05)
    assert m["survived"]


def test_gloo_style_failure_after_timeout():
    before = [0.1 * i for i in range(1, 101)]
    m = analyze(trace(before, error={"t_unix": T0 + 20.0, "message": "Timed out"}), T0 + 10.0, None, T0 + 20.0)
    assert m["failed"] and not m["survived"]
    assert m["failed_after_cut_s"] == pytest.approx(10.0)
    assert m["stall_s"] is None and m["ops_after_cut"] == 0
    assert m["algbw_during_cut_gbps"] == 0.0
    assert m["error"] == "Timed out"


def test_recovery_after_restore_measured():
    ends = [0.1 * i for i in range(1, 101)] + [20.5 + 0.1 * i for i in range(0, 95)]
    m = analyze(trace(ends), T0 + 10.0, T0 + 20.0, T0 + 30.0)
    assert m["ops_after_restore"] == 95
    assert m["algbw_after_restore_gbps"] == pytest.approx(10 * (1 << 20) / 1e9, rel=0.1)


@pytest.mark.parametrize("bad,msg", [
    ([], "want a JSON object"),
    ({"bytes": 1, "start_unix": 0, "ops": []}, "missing field 'error'"),
    ({"bytes": 1, "start_unix": 0, "ops": [[1.0]], "error": None}, r"ops\[0\] must be"),
])
def test_validate_trace(bad, msg):
    with pytest.raises(ValueError, match=msg):
        validate_trace(bad, "t.json")


def test_fallback_failure_timed_from_cut():
    from bench.harness.chaos import analyze_fallback

    m = analyze_fallback(False, True, T0 + 10, T0 + 21.5, None, 100, 1 << 24, "rank 1 exit 3: RailError")
    assert m["failed"] and not m["survived"] and m["failed_after_cut_s"] == pytest.approx(11.5)
    assert m["stall_s"] is None and m["algbw_whole_run_gbps"] is None


def test_fallback_survival_needs_the_cut_to_have_happened():
    from bench.harness.chaos import analyze_fallback

    m = analyze_fallback(True, True, T0 + 10, T0 + 30, 250_000.0, 100, 1 << 24, None)
    assert m["survived"] and m["algbw_whole_run_gbps"] == pytest.approx((1 << 24) / 0.25 / 1e9)
    assert not analyze_fallback(True, False, None, T0 + 5, 250_000.0, 100, 1 << 24, None)["survived"]


def test_stall_is_measured_against_the_surviving_pace():
    # 0.5 s ops before the cut, 0.7 s ops on the surviving rail; the op in flight took 0.8 s.
    before = [(0.5 * i, 500_000) for i in range(1, 21)]  # up to t=10.0
    after = [(10.8, 800_000)] + [(10.8 + 0.7 * i, 700_000) for i in range(1, 20)]
    t = {"bytes": 1 << 26, "start_unix": T0, "error": None,
         "ops": [[T0 + e, d] for e, d in before + after]}
    m = analyze(t, T0 + 10.2, None, T0 + 24.0)
    assert m["pace_during_cut_s"] == pytest.approx(0.7)
    assert m["stall_s"] == pytest.approx(0.8 - 0.7, abs=1e-6)  # gap 10.0 -> 10.8, pace 0.7
    assert m["worst_gap_excess_s"] == pytest.approx(0.8 - 0.7, abs=1e-6)
    assert m["slowdown_vs_before_s"] == pytest.approx(0.8 - 0.5, abs=1e-6)
    # Ended 0.6 s after the link event: sooner than a fresh op on the survivors would have.
    assert m["stall_after_link_event_s"] == pytest.approx(0.0)


def test_share_back_after_restore_needs_half_the_precut_share():
    from bench.harness.chaos import share_back_after_restore

    ends = [1.0 * i for i in range(1, 31)]
    split = [[0.7, 0.3]] * 10 + [[1.0, 0.0]] * 12 + [[0.9, 0.1], [0.8, 0.2], [0.75, 0.25]] + [[0.7, 0.3]] * 5
    t = {"bytes": 1, "start_unix": T0, "error": None, "ops": [[T0 + e, 1000] for e in ends], "op_split": split}
    # Ops take 1 ms. Restore at t=21.5; the op ending at 23 has 0.1 < 0.15, the one ending at 24
    # (started 23.999) has 0.2 >= 0.15.
    assert share_back_after_restore(t, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(2.499)
    assert share_back_after_restore(t, T0 + 10.5, T0 + 29.5, 1) is not None
    assert share_back_after_restore({**t, "op_split": [[1.0, 0.0]] * 30}, T0 + 10.5, T0 + 21.5, 1) is None


def test_share_back_counts_a_readmission_inside_an_operation():
    from bench.harness.chaos import share_back_after_restore

    # 1 s ops; r1 re-admitted at t=22.3, inside the op ending at 23 (it carried 0.12 of that op:
    # its share of the rest), and the op after has its full share: back 0.8 s after the restore.
    ends = [1.0 * i for i in range(1, 31)]
    split = [[0.7, 0.3]] * 10 + [[1.0, 0.0]] * 12 + [[0.88, 0.12]] + [[0.7, 0.3]] * 7
    t = {"bytes": 1, "start_unix": T0, "error": None, "rails": ["r0", "r1"],
         "ops": [[T0 + e, 1e6] for e in ends], "op_split": split,
         "readmissions": [{"rail": "r1", "t_unix": T0 + 22.3}]}
    assert share_back_after_restore(t, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(0.8)
    # Without the event only op starts count: the op starting at 23 is the first with >= 0.15.
    assert share_back_after_restore({**t, "readmissions": []}, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(1.5)
    # A re-admission whose next op carried nothing on the rail is not "carrying its share".
    bad = {**t, "op_split": split[:22] + [[1.0, 0.0]] + split[23:]}
    assert share_back_after_restore(bad, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(1.5)
    # An op that started before the re-admission and took the rail in early (0.2 of it) counts
    # from the re-admission, not from its own start.
    early = {**t, "op_split": split[:22] + [[0.8, 0.2]] + split[23:]}
    assert share_back_after_restore(early, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(0.8)
    # Re-admitted at an op's end (that op carried nothing on it): from the next op's start.
    late = {**t, "op_split": split[:22] + [[1.0, 0.0]] + split[23:],
            "readmissions": [{"rail": "r1", "t_unix": T0 + 22.99}]}
    assert share_back_after_restore(late, T0 + 10.5, T0 + 21.5, 1) == pytest.approx(1.5)


def _series(stall, link, during, back, failed=False):
    return {"metrics": {"failed": failed, "stall_s": stall, "stall_after_link_event_s": link,
                        "algbw_during_cut_gbps": during, "share_back_after_restore_s": back}}


def test_chaos_goals_pass_miss_and_incomplete():
    from bench.harness.chaos_goals import evaluate_chaos

    chaos = {"series": {"nezha-adaptive": _series(0.12, 0.03, 0.096, 0.8),
                        "gloo-best-rail": _series(0.0, 0.0, 0.1, None)}}
    verdicts = {g["id"]: g["verdict"] for g in evaluate_chaos(chaos)}
    assert verdicts == {"chaos-stall": "PASS", "chaos-stall-aim": "PASS", "chaos-throughput": "PASS",
                        "chaos-readmit": "PASS"}
    chaos["series"]["nezha-adaptive"] = _series(0.55, 0.2, 0.09, 2.5)  # stall over the 0.5 s limit
    verdicts = {g["id"]: g["verdict"] for g in evaluate_chaos(chaos)}
    assert set(verdicts.values()) == {"MISS"}
    chaos["series"]["nezha-adaptive"] = _series(None, None, 0.0, None, failed=True)
    del chaos["series"]["gloo-best-rail"]
    verdicts = {g["id"]: g["verdict"] for g in evaluate_chaos(chaos)}
    assert set(verdicts.values()) == {"INCOMPLETE"}


def _hole_run(detect_s, ops_after, readmit_at=None):
    """A Nezha loop trace through a black hole from t=10 to t=20 (t0 = T0): one op per 0.1 s of
    1 GB before the hole, `ops_after` ops after detection."""
    hole, healed = 10.0, 20.0
    ops = [[T0 + 0.1 * i, 100_000] for i in range(1, 100)]
    det = hole + detect_s
    ops += [[T0 + det + (healed - det) * (i + 1) / (ops_after + 1), 100_000] for i in range(ops_after)]
    trace = {"bytes": 10 ** 9, "start_unix": T0, "error": None, "ops": ops,
             "failovers": [{"t_unix": T0 + det, "rail": "r1", "reason": "watchdog"}],
             "readmissions": [] if readmit_at is None else [{"t_unix": T0 + readmit_at, "rail": "r1"}]}
    return {"t0_unix": T0, "events": {"cut_unix": hole, "restore_unix": healed}, "trace": trace,
            "metrics": {"failed": False, "worst_gap_excess_s": 0.4, "stall_s": detect_s / 2,
                        "share_back_after_restore_s": None if readmit_at is None else 0.5}}


def test_fault_goals_black_hole_and_gray():
    from bench.harness.chaos_goals import evaluate_faults

    control = {"metrics": {"failed": False, "algbw_during_cut_gbps": 10.0}}
    gray = {"metrics": {"failed": False, "worst_gap_excess_s": 0.6, "algbw_during_cut_gbps": 9.6,
                        "share_back_after_restore_s": 0.7}}
    chaos = {"faults": {"blackhole": {"series": {"nezha-adaptive": _hole_run(0.8, 99),
                                                 "gloo-best-rail": control}},
                        "gray": {"series": {"nezha-adaptive": gray, "gloo-best-rail": control}}}}
    got = {g["id"]: (g["verdict"], g["value"]) for g in evaluate_faults(chaos)}
    assert got["hole-detect"][0] == "PASS" and got["hole-detect"][1] == pytest.approx(0.8)
    # 99 ops of 1 GB in 9.2 s = 10.76 GB/s against the survivor's 10 GB/s.
    assert got["hole-throughput"][0] == "PASS" and got["hole-throughput"][1] == pytest.approx(99 / 9.2 / 10, rel=1e-3)
    assert got["hole-no-readmit"] == ("PASS", 0)
    assert got["gray-stall"] == ("PASS", 0.6)
    assert got["hole-stall"] == ("PASS", 0.4)
    assert got["hole-share-back"] == ("INCOMPLETE", None)  # never re-admitted in this trace
    assert got["gray-pace"][0] == "PASS" and got["gray-pace"][1] == pytest.approx(0.96)
    assert got["gray-share-back"] == ("PASS", 0.7)

    chaos["faults"]["blackhole"]["series"]["nezha-adaptive"] = _hole_run(1.5, 50, readmit_at=15.0)
    chaos["faults"]["blackhole"]["series"]["nezha-adaptive"]["metrics"].update(share_back_after_restore_s=1.2)
    gray["metrics"].update(worst_gap_excess_s=2.5, algbw_during_cut_gbps=9.0, share_back_after_restore_s=4.5)
    got = {g["id"]: g["verdict"] for g in evaluate_faults(chaos)}
    assert got == {"hole-detect": "MISS", "hole-throughput": "MISS", "hole-no-readmit": "MISS", "hole-stall": "MISS",
                   "hole-share-back": "MISS", "gray-stall": "MISS", "gray-pace": "MISS", "gray-share-back": "MISS"}

    got = {g["id"]: g["verdict"] for g in evaluate_faults({})}
    assert set(got.values()) == {"INCOMPLETE"}
