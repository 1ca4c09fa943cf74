"""The simulator's core (bench/sim): algorithm costs, the hot split, the scheduler's choice,
agreement schemes, failover, and the fit to suite results."""

import math

import pytest

from bench.sim import params
from bench.sim.model import Agreement, Rail, Scheduler, algorithm_terms, algorithm_time, best_algorithm, hot_split

FAST = Rail("fast", alpha=50e-6, beta=1 / 100e6)
SLOW = Rail("slow", alpha=50e-6, beta=1 / 37.5e6)
NONE = Agreement("epoch", 50e-6, 10e-6)


def test_algorithm_terms():
    assert algorithm_terms("ring", 4) == (6.0, 1.5)
    assert algorithm_terms("rhd", 8) == (6.0, 1.75)
    # 6 ranks: recursive halving/doubling on 4, plus a fold in and out
    assert algorithm_terms("rhd", 6) == (2 * 2 + 2, 1.5 + 2)
    assert algorithm_terms("tree", 5) == (6.0, 6.0)
    assert algorithm_terms("ring", 1) == (0.0, 0.0)
    with pytest.raises(ValueError, match="unknown algorithm 'bogus'"):
        algorithm_terms("bogus", 4)
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        algorithm_terms("ring", 0)


def test_rail_rejects_bad_parameters():
    with pytest.raises(ValueError, match="rail x: alpha must be >= 0 and beta > 0"):
        Rail("x", 1e-6, 0.0)


def test_best_algorithm_latency_vs_bandwidth():
    # tiny message on many ranks: a log-step algorithm; big message: a bandwidth-optimal one
    assert best_algorithm(FAST, 1024, 8)[1] in ("rd", "tree")
    assert best_algorithm(FAST, 1024, 1 << 28)[1] in ("ring", "rhd")
    t, algo = best_algorithm(FAST, 4, 1 << 20)
    assert t == min(algorithm_time(a, FAST, 4, 1 << 20) for a in ("ring", "rhd", "tree", "rd"))


def test_hot_split_equal_rails_halves():
    shares, t = hot_split((FAST, FAST), 8, 1 << 26)
    assert shares == pytest.approx([0.5, 0.5])
    assert t == pytest.approx(best_algorithm(FAST, 8, 1 << 25)[0], rel=1e-6)


def test_hot_split_large_message_is_bandwidth_proportional():
    shares, _ = hot_split((FAST, SLOW), 4, 1 << 30)
    assert shares[1] == pytest.approx(37.5 / 137.5, rel=1e-3)


def test_scheduler_cold_small_hot_large_and_threshold_falls_with_n():
    sched = Scheduler((FAST, SLOW), NONE, split_cost=500e-6)
    assert sched.op_time(4, 1024)[1] == "cold"
    t, mode, shares = sched.op_time(4, 1 << 26)
    assert mode == "hot" and sum(shares) == pytest.approx(1.0)
    sizes = [1 << k for k in range(10, 29)]
    th = [sched.threshold(n, sizes) for n in (4, 8, 64)]
    assert all(x is not None for x in th)
    assert th[0] >= th[1] >= th[2]
    # gain vs one rail: none when cold, close to the rate sum / best rate when large
    assert sched.single_rail_time(4, 1024) / sched.op_time(4, 1024)[0] == pytest.approx(1.0)
    assert sched.single_rail_time(4, 1 << 28) / sched.op_time(4, 1 << 28)[0] == pytest.approx(1.375, rel=0.01)


def test_agreement_schemes():
    a2a, tree, epoch = (Agreement(s, 50e-6, 10e-6) for s in ("all-to-all", "tree", "epoch"))
    assert a2a.per_op(1024) == pytest.approx(50e-6 + 1023 * 10e-6)
    assert tree.per_op(1024) == pytest.approx(10 * 60e-6)
    assert epoch.per_op(1024) == 0.0 and epoch.per_op(1024, changed=True) == tree.per_op(1024)
    assert a2a.per_op(1) == 0.0
    with pytest.raises(ValueError, match="unknown agreement scheme"):
        Agreement("gossip", 1e-6, 1e-6).per_op(4)


def test_failover_stall_is_detection_agreement_and_replay():
    sched = Scheduler((FAST, FAST), Agreement("tree", 50e-6, 10e-6))
    size = 1 << 26
    stall = sched.failover_stall(1024, size, failed=1, detection=0.005)
    replay = best_algorithm(FAST, 1024, size / 2)[0]
    assert stall == pytest.approx(0.005 + 10 * 60e-6 + replay)
    with pytest.raises(ValueError, match="no rail survives"):
        Scheduler((FAST,), NONE).failover_stall(4, size, failed=0, detection=0.0)


def test_fit_line_recovers_line():
    sizes = [1 << k for k in range(10, 20)]
    c, b = params.fit_line(sizes, [3e-4 + s * 2e-8 for s in sizes])
    assert c == pytest.approx(3e-4) and b == pytest.approx(2e-8)
    with pytest.raises(ValueError):
        params.fit_line([1], [1.0])


def test_fit_suite_recovers_alpha_and_efficiency():
    n, alpha, per_msg, eff, rate = 4, 40e-6, 10e-6, 0.9, 500
    beta = 8 / (rate * 1e6 * eff)
    a, b = algorithm_terms("ring", n)
    sizes = [1 << k for k in range(10, 24)]
    results = [{"bytes": s, "time_us": 1e6 * (a * alpha + alpha + (n - 1) * per_msg + b * s * beta)} for s in sizes]
    suite = {"ranks": n, "mode": "full", "started": "t",
             "scenarios": [{"name": "h", "rates_mbit": [rate, rate], "best_rail": 0,
                            "series": {"nezha-single": {"results": results}}}]}
    fit = params.fit_suite(suite, per_message=per_msg)
    assert fit["alpha"] == pytest.approx(alpha, rel=1e-6)
    assert fit["efficiency"] == pytest.approx(eff, rel=1e-6)
    rails = params.rails_for([rate, 2 * rate], fit)
    assert rails[0].beta == pytest.approx(beta) and rails[1].beta == pytest.approx(beta / 2)
    assert math.isclose(params.agreement_for("all-to-all", fit).per_op(n), alpha + (n - 1) * per_msg)
