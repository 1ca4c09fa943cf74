"""The unshaped-rails benchmark's pure logic (harness/unshaped.py, unshaped_report.py) and the
rank CPU wrapper (harness/rusage_exec.py)."""

import json
import os
import subprocess
import sys

import pytest

from bench.harness.unshaped import (ADAPTIVE, GLOO, SINGLE, Cell, Launch, best_nezha_ratios, busy_ticks,
                              cycles_per_byte, judge, nominal_mhz, parse_knob, plan_size, ratios, steady_cost,
                              summarize, verdicts)
from bench.harness.unshaped_report import table, verdict_lines

K, M = 1 << 10, 1 << 20


def test_nominal_mhz_reads_the_first_cpu_mhz_line():
    text = "processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2300.000\n\nprocessor\t: 1\ncpu MHz\t\t: 2299.9\n"
    assert nominal_mhz(text) == 2300.0
    with pytest.raises(ValueError):
        nominal_mhz("processor : 0\n")


def test_busy_ticks_counts_everything_but_idle_and_iowait():
    # user nice system idle iowait irq softirq steal guest guest_nice
    text = "cpu  100 2 30 5000 7 1 4 3 0 0\ncpu0 50 1 15 2500 3 0 2 1 0 0\n"
    assert busy_ticks(text) == 100 + 2 + 30 + 1 + 4 + 3
    with pytest.raises(ValueError):
        busy_ticks("intr 1 2 3\n")


def test_plan_size_bounds_ops_and_keeps_the_long_launch_longer():
    p = plan_size(64 * K, 1 << 30, 256 * M)
    assert (p.long_iters, p.short_iters, p.warmup) == (4000, 800, 20)  # capped
    p = plan_size(64 * M, 1 << 30, 256 * M)
    assert (p.long_iters, p.short_iters, p.warmup) == (16, 3, 4)
    p = plan_size(256 * M, 1 << 30, 256 * M)
    assert p.long_iters == 10 and p.short_iters == 2 and p.warmup == 3  # floors
    for s in (64 * K, M, 16 * M, 64 * M):
        q = plan_size(s, 1 << 30, 256 * M)
        assert q.long_iters > q.short_iters >= 2
    with pytest.raises(ValueError):
        plan_size(0, 1 << 30, 0)


def test_steady_cost_takes_the_fixed_cost_out():
    # 0.5 s fixed (start, probe, warmup) + 2 ms per op; the busbw plays no part.
    short = Launch(iters=100, cpu_s=0.5 + 100 * 0.002, busbw_gbps=1.0, machine_busy_s=1.0)
    long = Launch(iters=500, cpu_s=0.5 + 500 * 0.002, busbw_gbps=1.0, machine_busy_s=2.6)
    c = steady_cost(short, long)
    assert c.cpu_per_op_s == pytest.approx(0.002)
    assert c.fixed_cpu_s == pytest.approx(0.5)
    assert c.machine_per_op_s == pytest.approx(0.004)
    assert steady_cost(Launch(1, 0.1, 1.0), Launch(3, 0.3, 1.0)).machine_per_op_s is None
    with pytest.raises(ValueError):
        steady_cost(long, short)


def test_cycles_per_byte_is_cpu_times_clock_over_op_size():
    # 1 ms of CPU for a 1 MiB op at 2300 MHz: 2.3e6 cycles / 1 MiB.
    assert cycles_per_byte(1e-3, 2300.0, M) == pytest.approx(2.3e6 / M)


def test_summarize_takes_medians_over_repeats():
    pairs = [(Launch(10, 1.0 + 10 * d, bw), Launch(50, 1.0 + 50 * d, bw2))
             for d, bw, bw2 in ((1e-3, 0.1, 1.0), (2e-3, 0.1, 3.0), (9e-3, 0.1, 2.0))]
    c = summarize(M, pairs, 1000.0)
    assert c.cpu_per_op_s == pytest.approx(2e-3)
    assert c.busbw_gbps == 2.0  # the long launches' busbw, median
    assert c.fixed_cpu_s == pytest.approx(1.0)
    assert c.machine_cycles_per_byte is None and c.repeats == 3
    with pytest.raises(ValueError):
        summarize(M, [], 1000.0)


def cell(size, busbw, cyc=1.0):
    return Cell(size=size, busbw_gbps=busbw, cpu_per_op_s=0.0, fixed_cpu_s=0.0, cycles_per_byte=cyc,
                machine_cycles_per_byte=None, repeats=1)


def cells_of(single, adaptive, gloo):
    return {n: {s: cell(s, bw) for s, bw in vals.items()}
            for n, vals in ((SINGLE, single), (ADAPTIVE, adaptive), (GLOO, gloo)) if vals is not None}


def test_ratios_and_best_nezha():
    c = cells_of({64 * K: 1.1, M: 2.0}, {64 * K: 0.9, M: 3.0}, {64 * K: 1.0, M: 2.0})
    assert ratios(c, SINGLE) == pytest.approx({64 * K: 1.1, M: 1.0})
    assert best_nezha_ratios(c) == {64 * K: (SINGLE, pytest.approx(1.1)), M: (ADAPTIVE, pytest.approx(1.5))}


def test_judge_misses_below_goal_and_what_was_not_measured():
    sizes = [32 * K, 64 * K, M]
    # 32K is below (B)'s floor, so it is not judged.
    assert judge({32 * K: 0.5, 64 * K: 1.06, M: 1.2}, 1.05, 64 * K, sizes)["status"] == "PASS"
    j = judge({64 * K: 1.06, M: 1.01}, 1.05, 64 * K, sizes)
    assert j["status"] == "MISS" and j["below"] == [M] and j["worst"] == pytest.approx(1.01)
    j = judge({64 * K: 1.3}, 1.05, 64 * K, sizes)
    assert j["status"] == "MISS" and j["missing"] == [M]
    assert judge({}, 1.05, 64 * K, [])["status"] == "MISS"  # nothing judged is no pass


def test_verdicts_b_uses_single_u_uses_the_better_series():
    sizes = [64 * K, M]
    v = verdicts(cells_of({64 * K: 1.3, M: 1.06}, {64 * K: 1.0, M: 1.5}, {64 * K: 1.0, M: 1.0}), sizes)
    assert v["B"]["status"] == "PASS"
    assert v["U"]["status"] == "PASS" and v["U"]["best_series"] == {64 * K: SINGLE, M: ADAPTIVE}
    v = verdicts(cells_of({64 * K: 1.0, M: 1.0}, {64 * K: 1.1, M: 1.1}, {64 * K: 1.0, M: 1.0}), sizes)
    assert v["B"]["status"] == "MISS" and v["U"]["status"] == "MISS"
    # A run without nezha-adaptive (a knob run) does not judge (U) at all.
    v = verdicts(cells_of({64 * K: 1.3, M: 1.3}, None, {64 * K: 1.0, M: 1.0}), sizes)
    assert v["B"]["status"] == "PASS" and v["U"]["status"] == "N/A"
    # Without the Gloo series nothing can be judged.
    v = verdicts(cells_of({64 * K: 9.0, M: 9.0}, None, None), sizes)
    assert v["B"]["status"] == "MISS" and v["B"]["missing"] == sizes


def test_verdict_c_is_bytes_per_cpu_second_of_two_rails_against_gloo_on_one():
    sizes = [64 * K, M]
    c = {ADAPTIVE: {64 * K: cell(64 * K, 1.0, cyc=2.0), M: cell(M, 1.0, cyc=1.0)},
         GLOO: {64 * K: cell(64 * K, 1.0, cyc=3.0), M: cell(M, 1.0, cyc=1.5)}}
    v = verdicts(c, sizes)["C"]
    assert v["status"] == "PASS" and v["worst"] == pytest.approx(1.5)  # 3.0/2.0 and 1.5/1.0
    c[ADAPTIVE][M] = cell(M, 1.0, cyc=1.25)  # 1.5 / 1.25 = 1.2 < 1.3
    v = verdicts(c, sizes)["C"]
    assert v["status"] == "MISS" and v["below"] == [M] and v["worst"] == pytest.approx(1.2)
    assert "MISS (C) nezha-adaptive (two rails) bytes per CPU second >= 1.30x" in "\n".join(
        verdict_lines(verdicts(c, sizes)))
    assert verdicts({GLOO: c[GLOO]}, sizes)["C"]["status"] == "N/A"  # no two-rail series, no verdict


def test_parse_knob_names_the_series_by_its_variables():
    assert parse_knob("NEZHA_STREAMS_PER_PEER=1") == ("nezha-single[STREAMS_PER_PEER=1]",
                                                       {"NEZHA_STREAMS_PER_PEER": "1"})
    name, env = parse_knob("NEZHA_FAILOVER=stop, NEZHA_SOCKET_BUFFER=0")
    assert name == "nezha-single[FAILOVER=stop,SOCKET_BUFFER=0]" and env["NEZHA_SOCKET_BUFFER"] == "0"
    for bad in ("STREAMS=1", "NEZHA_X", "NEZHA_X=", "NEZHA_=1", "NEZHA_A B=1"):
        with pytest.raises(ValueError):
            parse_knob(bad)


def test_report_shows_every_series_ratios_and_verdicts():
    c = cells_of({64 * K: 1.2, M: 1.0}, {64 * K: 1.0, M: 1.5}, {64 * K: 1.0, M: 2.0})
    text = "\n".join(table(c, [SINGLE, ADAPTIVE, GLOO], [64 * K, M]) + verdict_lines(verdicts(c, [64 * K, M])))
    assert "nezha-single" in text and "gloo-best-rail" in text and "best nezha / gloo" in text
    assert "MISS (B)" in text and "below at 1M" in text
    assert "  1.20   0.50" in text  # single / gloo at 64K and 1M
    # A size a series lacks is shown as such, not silently dropped.
    c[SINGLE].pop(M)
    assert "not measured" in "\n".join(table(c, [SINGLE, GLOO], [64 * K, M]))


def test_rusage_exec_reports_the_childs_cpu_and_its_exit_status(tmp_path):
    out = tmp_path / "ru.json"
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness",
                          "rusage_exec.py")
    burn = "import sys\nx = 0\nfor i in range(3_000_000): x += i\nsys.exit(3)"
    p = subprocess.run([sys.executable, script, str(out), "--", sys.executable, "-c", burn])
    assert p.returncode == 3
    doc = json.loads(out.read_text())
    assert doc["rc"] == 3 and doc["user_s"] + doc["sys_s"] > 0.01
    assert subprocess.run([sys.executable, script, str(out)], capture_output=True).returncode == 2
