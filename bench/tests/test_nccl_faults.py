"""The NCCL plugin's fault judgement (harness/nccl_faults.py): pure functions on made-up traces."""

import pytest

from bench.harness.nccl_faults import delivered_gbps, judge_fault, steady_gbps, trace_of

MB8 = 8 << 20


def loop(ends_and_us):
    return {"bytes": MB8, "start_unix": 100.0, "ops": [[t, us] for t, us in ends_and_us], "error": None}


def test_trace_of_wants_a_seconds_loop_result():
    doc = {"bytes": MB8, "start_unix": 1.5, "op_trace": [[2.0, 500000.0]], "check": "ok"}
    assert trace_of(doc, "r0")["ops"] == [[2.0, 500000.0]]
    with pytest.raises(ValueError, match="r0: .*'op_trace'"):
        trace_of({"bytes": MB8, "start_unix": 1.5}, "r0")


def test_steady_rate_skips_the_first_operation():
    # 1 set-up op, then one op every 0.1 s: 8 MiB / 0.1 s.
    t = loop([(101.0, 900000)] + [(101.0 + 0.1 * i, 100000) for i in range(1, 11)])
    assert steady_gbps(t) == pytest.approx(MB8 / 0.1 / 1e9)
    assert steady_gbps(loop([(101.0, 1)])) is None


def test_a_fault_at_full_survivor_pace_passes_and_a_long_stall_misses():
    # 0.1 s per op on two rails until the fault at 102.05, 0.2 s per op on one rail during it.
    ops = [(101.0 + 0.1 * i, 100000) for i in range(11)]  # up to 102.0
    ops += [(102.0 + 0.2 * i, 200000) for i in range(1, 26)]  # up to 107.0, the fault ends at 107.0
    one_rail = MB8 / 0.2 / 1e9
    j = judge_fault("cut", loop(ops), 102.05, 107.0, one_rail)
    assert j["stall_s"] == pytest.approx(0.0, abs=1e-9)
    assert j["pace_vs_one_rail"] == pytest.approx(1.0, rel=0.05)
    assert (j["stall_verdict"], j["pace_verdict"]) == ("PASS", "PASS")
    # The op in flight takes 2 s more: the stall misses, the pace after it still passes.
    late = ops[:11] + [(t + 2.0, us) for t, us in ops[11:]]
    j = judge_fault("blackhole", loop(late), 102.05, 109.0, one_rail)
    assert j["stall_s"] == pytest.approx(2.0, abs=0.01) and j["stall_verdict"] == "MISS"
    # Without a one-rail baseline the pace cannot be judged: MISS, never a silent PASS.
    assert judge_fault("gray", loop(ops), 102.05, 107.0, None)["pace_verdict"] == "MISS"


def test_the_pace_counts_the_part_of_the_operation_in_flight_at_the_end():
    # One op every 0.2 s from 102.0; the fault ends at 103.1, half way through the op ending at 103.2.
    ops = [(101.0 + 0.1 * i, 100000) for i in range(11)] + [(102.0 + 0.2 * i, 200000) for i in range(1, 10)]
    t = loop(ops)
    # First completion after the onset 102.05 is 102.2; by 103.1 four more and half of the next.
    assert delivered_gbps(t, 102.05, 103.1) == pytest.approx(4.5 * MB8 / 0.9 / 1e9)
    j = judge_fault("cut", t, 102.05, 103.1, MB8 / 0.2 / 1e9)
    assert j["pace_vs_one_rail"] == pytest.approx(1.0)
    assert j["pace_whole_ops_vs_one_rail"] == pytest.approx(4 / 4.5)
    # No completion inside the window: nothing to judge.
    assert delivered_gbps(loop(ops[:11]), 102.05, 103.1) is None
    assert delivered_gbps(t, 102.05, 102.1) is None
