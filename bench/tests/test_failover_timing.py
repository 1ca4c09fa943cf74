"""The failure-timing judgement (harness/failover_timing.py): pure functions."""

import pytest

from bench.harness.failover_timing import breakdown_restore, error_line, judge_all_down, verdict

FAMILY = "operation 7 failed: no rail left to finish it on"


def test_all_down_wants_the_family_naming_every_rail_on_every_rank():
    ranks = [{"rc": 3, "exit_after_s": 0.62,
              "log": f"x\nnezha-bench: {FAMILY} (rank(s) 1 heard on no rail [rails tried: r0, r1])\n"},
             {"rc": 3, "exit_after_s": 0.05,
              "log": f"nezha-bench: {FAMILY} (every link of this rank is down: r0 (r0), r1 (r1))\n"}]
    j = judge_all_down(ranks, ["r0", "r1"])
    assert j["clear"] and j["worst_s"] == pytest.approx(0.62) and j["problems"] == []
    # One rank names only one rail, another exited 0: not clear.
    ranks[0]["log"] = f"{FAMILY} (r0 failed)\n"
    ranks[1]["rc"] = 0
    j = judge_all_down(ranks, ["r0", "r1"])
    assert not j["clear"] and len(j["problems"]) == 2
    # A rank that never exited has no time: no worst.
    assert judge_all_down([{"rc": None, "exit_after_s": None, "log": ""}], ["r0"])["worst_s"] is None


def test_error_line_and_verdict():
    assert error_line("a\nb no rail left to finish it on c\n") == "b no rail left to finish it on c"
    assert error_line("timeout\n") is None
    assert verdict(0.8, 1.0) == "PASS"
    assert verdict(1.2, 1.0) == "MISS"
    assert verdict(None, 1.0) == "MISS"
    assert verdict(0.5, 1.0, ok=False) == "MISS"


def test_breakdown_restore_finds_a_readmission_between_waves():
    t = {"rails": ["r0", "r1"], "ops": [[10.0, 1e6], [11.0, 1e6], [12.0, 1e6]],
         "op_split": [[0.7, 0.3], [0.85, 0.15], [0.7, 0.3]], "wave_rounds": 9, "mid_op_readmissions": 1,
         "readmissions": [{"rail": "r1", "t_unix": 10.4, "stall_s": 0.05}]}
    b = breakdown_restore(t, 9.8, 1)
    assert b["readmitted_after_s"] == pytest.approx(0.6)
    assert b["mid_op"] is True and b["rebuild_s"] == 0.05 and b["wave_rounds"] == 9
    assert breakdown_restore({**t, "readmissions": []}, 9.8, 1)["readmitted_after_s"] is None
