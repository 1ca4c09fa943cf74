import pytest

from harness.chaos import analyze, validate_trace

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
    from harness.chaos import analyze_fallback

    m = analyze_fallback(False, True, T0 + 10, T0 + 21.5, None, 100, 1 << 24, "rank 1 exit 3: RailError")
    assert m["failed"] and not m["survived"] and m["failed_after_cut_s"] == pytest.approx(11.5)
    assert m["stall_s"] is None and m["algbw_whole_run_gbps"] is None


def test_fallback_survival_needs_the_cut_to_have_happened():
    from harness.chaos import analyze_fallback

    m = analyze_fallback(True, True, T0 + 10, T0 + 30, 250_000.0, 100, 1 << 24, None)
    assert m["survived"] and m["algbw_whole_run_gbps"] == pytest.approx((1 << 24) / 0.25 / 1e9)
    assert not analyze_fallback(True, False, None, T0 + 5, 250_000.0, 100, 1 << 24, None)["survived"]
