"""harness/alltoall.py: rows out of nezha-bench --vs-composed JSON and the verdicts."""
import pytest

from bench.harness import alltoall


def result(size, new, composed, check="ok", hot=True):
    return {"bytes": size, "time_us": new, "composed_time_us": composed, "check": check, "hot": hot}


def test_rows_carry_the_side_by_side_ratio():
    rs = alltoall.rows({"results": [result(1024, 100.0, 150.0), result(1 << 20, 1000.0, 3900.0)]})
    assert [r["speedup"] for r in rs] == [1.5, 3.9]
    assert rs[1]["composed_us"] == 3900.0


def test_rows_refuse_a_run_without_the_baseline():
    with pytest.raises(ValueError, match="--vs-composed"):
        alltoall.rows({"results": [{"bytes": 1, "time_us": 1.0, "check": "ok", "hot": False}]})


def test_verdicts_pass_and_miss():
    good = alltoall.rows({"results": [result(1024, 100, 99), result(16 << 20, 1000, 2100)]})
    assert [v for _, v, _ in alltoall.verdicts(4, good)] == ["PASS", "PASS", "PASS"]
    slow_small = alltoall.rows({"results": [result(1024, 100, 90), result(16 << 20, 1000, 2100)]})
    assert [v for _, v, _ in alltoall.verdicts(4, slow_small)] == ["PASS", "MISS", "PASS"]
    weak_large = alltoall.rows({"results": [result(16 << 20, 1000, 1500, check="failed")]})
    names = alltoall.verdicts(4, weak_large)
    assert [v for _, v, _ in names] == ["MISS", "PASS", "MISS"]
    assert "1.50x at 16M (want >= n/2 = 2)" in names[2][2]


def test_table_lists_every_size():
    rs = alltoall.rows({"results": [result(4096, 10.0, 20.0, hot=False)]})
    text = alltoall.table(2, rs)
    assert "4K" in text and "2.00x" in text and "cold" in text


def test_tune_section_is_the_alltoall_block():
    lines = ["# allreduce, 2 ranks: us per operation (ratio to ring)", "1024 1 2",
             "# alltoall, 2 ranks: us per operation (ratio to pairwise)", "  size(B) pairwise direct  winner",
             "  1024 10.0 (1.00x) 5.0 (0.50x)  direct", "# allreduce cold vs hot, 2 ranks", "1024 1 2"]
    assert alltoall.tune_section(lines) == lines[3:5]
