import pytest

from bench.harness.goals import Goal, evaluate
from bench.harness.tables import format_table, goals_table, ratio_table, series_table


def test_format_table_aligns_columns():
    t = format_table(["size", "a"], [["1K", "1.00x"], ["256M", "n/a"]])
    assert t.splitlines() == ["size      a", "----  -----", "1K    1.00x", "256M    n/a"]


def test_format_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="row has 1 cells, want 2"):
        format_table(["a", "b"], [["x"]])


def test_series_table_marks_missing_and_failed():
    series = {"nezha-adaptive": [{"bytes": 1024, "algbw_gbps": 0.01234, "check": "ok"},
                                 {"bytes": 2048, "algbw_gbps": 0.02, "check": "failed"}],
              "gloo-best-rail": [{"bytes": 1024, "algbw_gbps": 0.01, "check": "ok"}],
              "gloo-mptcp": []}
    lines = series_table(series, ["nezha-adaptive", "gloo-mptcp", "gloo-best-rail"], [1024, 2048]).splitlines()
    assert lines[0].split() == ["size", "nezha-adaptive", "gloo-best-rail"]  # empty series dropped
    assert lines[2].split() == ["1K", "0.0123", "0.0100"]
    assert lines[3].split() == ["2K", "FAILED", "n/a"]


def test_ratio_table_formats_and_keeps_spec_order():
    ratios = {"nezha/static": [{"bytes": 1024, "ratio": 1.0}],
              "nezha/best-single": [{"bytes": 1024, "ratio": 1.956}]}
    lines = ratio_table(ratios).splitlines()
    assert lines[0].split() == ["size", "nezha/best-single", "nezha/static"]
    assert lines[2].split() == ["1K", "1.96x", "1.00x"]
    assert ratio_table({}) == "(no ratios)"


def test_goals_table_row():
    g = Goal("t", ">= 1.9x best single rail", "nezha/best-single", ("homogeneous",), 1.9, min_bytes=4 << 20)
    res = evaluate(g, {"homogeneous": {"nezha/best-single": [{"bytes": 4 << 20, "ratio": 1.5}]}})
    line = goals_table([res]).splitlines()[2]
    assert ">= 1.9x best single rail" in line and "homogeneous, >= 4M" in line
    assert "worst 1.50x at homogeneous 4M (median 1.50, best 1.50)" in line and line.endswith("MISS")


def test_format_table_explicit_alignment():
    t = format_table(["a", "b"], [["x", "yy"], ["zzz", "w"]], align="ll")
    assert t.splitlines()[3] == "zzz  w"
    with pytest.raises(ValueError, match="align"):
        format_table(["a", "b"], [], align="lx")
