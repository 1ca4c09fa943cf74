"""The scale run's judging (bench/run_scale_runtime.py): targets, simulator error, the table."""
import pytest

from bench.run_scale_runtime import judge, parse_ranks, passes_in_a_row, report, sim_error, sockets_bound, summarize


def measurement(n=8, sockets=20, rss=10 << 20, agreed=0.05, startup=1.5, killed_after=(0.1, 0.2)):
    usage = [{"sockets": sockets, "threads": 5, "rss_bytes": rss}] * n
    return {"ranks": n, "hosts": n // 4, "startup": {"seconds": startup, "rc": [0] * n}, "steady": {"usage": usage,
            "allreduce_1k_median_s": 0.002},
            "collectives": {"allreduce": {"rows": [{"bytes": 4 << 20, "time_us": 600000.0}], "error": ""}},
            "cut": {"agreed_s": agreed}, "kill": {"exit_after_kill_s": list(killed_after),
                                                   "errors": ["nezha-bench: peer 7 gone"] * len(killed_after)},
            "job_env": [], "scenario_passed": True, "load_before": [1.0, 1, 1], "load_after": [2.0, 1, 1], "measured_utc": "t"}


def test_sockets_bound_is_4_log2_n_per_rail():
    assert sockets_bound(8, 2) == 24
    assert sockets_bound(64, 2) == 48
    assert sockets_bound(48, 1) == 24  # ceil(log2 48) = 6


def test_targets_pass_and_miss_at_their_bounds():
    ok = judge(summarize(measurement(sockets=24, rss=64 << 20, agreed=1.0, startup=10.0, killed_after=(1.0,))))
    assert ok == {"startup": True, "sockets": True, "rss": True, "failover": True, "kill": True}
    bad = judge(summarize(measurement(sockets=25, rss=(64 << 20) + 1, agreed=1.01, startup=10.5, killed_after=(1.2,))))
    assert bad == {"startup": False, "sockets": False, "rss": False, "failover": False, "kill": False}


def test_sim_error_is_predicted_over_measured():
    s = summarize(measurement())
    e = sim_error(s, [{"ranks": 8, "allreduce_1k_s": 0.001, "allreduce_4m_s": 0.9, "failover_agreed_s": 0.05}])
    assert e["allreduce_1k_s"]["sim_over_measured"] == pytest.approx(0.5)
    assert e["allreduce_4m_s"]["sim_over_measured"] == pytest.approx(1.5)
    assert sim_error(s, [{"ranks": 16}]) == {}


def test_report_prints_miss_honestly():
    s = summarize(measurement(sockets=30))
    s["judged"], s["sim_error"] = judge(s), {}
    text = report([s])
    assert "| 8 | defaults | 2 | 1.50 s PASS | 30 (24) MISS |" in text
    assert "- N=8 (defaults): 1 in a row;" in text  # a point without kept runs is one run


def test_runs_in_a_row_count_back_from_the_latest_failure():
    runs = [{"scenario_passed": ok} for ok in (True, False, True, True, True)]
    assert passes_in_a_row(runs) == 3
    assert passes_in_a_row(runs[:2]) == 0


def test_rank_counts_are_validated():
    assert parse_ranks("8,16") == [8, 16]
    for bad in ("6", "x", "", "4"):
        with pytest.raises(SystemExit, match="--ranks"):
            parse_ranks(bad)


def test_posthoc_simulator_value_is_kept_apart_from_the_prediction():
    s = summarize(measurement(agreed=0.1))
    e = sim_error(s, [{"ranks": 8, "allreduce_1k_s": 0.001, "allreduce_4m_s": 0.9, "failover_agreed_s": 0.01}], 0.12)
    assert e["failover_agreed_s"]["sim_over_measured"] == pytest.approx(0.1)
    assert e["failover_posthoc"]["sim_over_measured"] == pytest.approx(1.2)


def test_a_failed_start_up_has_no_start_up_time():
    m = measurement()
    m["startup"]["rc"] = [3] * 8
    m["collectives"]["allreduce"]["error"] = "nezha-bench: operation 0 failed"
    s = summarize(m)
    assert s["startup_s"] is None and judge(s)["startup"] is None
    assert s["collective_error"] == "nezha-bench: operation 0 failed"
