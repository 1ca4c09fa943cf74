import pytest

from bench.harness import ddp


def test_parse_report_takes_last_line():
    text = "noise\nREPORT {\"a\": 1}\nmore\nREPORT {\"a\": 2}\n"
    assert ddp.parse_report(text) == {"a": 2}
    assert ddp.parse_report("nothing here") is None


def test_launch_median_is_slowest_rank():
    assert ddp.launch_median([[1.0, 2.0, 3.0], [2.0, 4.0, 9.0]]) == 4.0
    with pytest.raises(ValueError, match="step_times"):
        ddp.launch_median([[1.0], []])


def test_judge():
    assert ddp.judge(0.5, 1.0) == (0.5, "PASS")
    assert ddp.judge(0.6, 1.0)[1] == "PASS"
    assert ddp.judge(0.7, 1.0) == (pytest.approx(0.7), "MISS")
    assert ddp.judge(None, 1.0) == (None, "NOT RUN")


def test_format_row():
    assert "MISSING" in ddp.format_row("gloo-mptcp", None, [], "why")
    row = ddp.format_row("gloo-1rail", 0.25, [0.2, 0.3])
    assert "250.0 ms" in row and "200, 300" in row
