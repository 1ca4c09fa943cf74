import json

from bench.harness.ceiling import ceiling_algbw_gbps
from bench.harness.goals import evaluate_all
from bench.harness.merge import constant_series
from bench.harness.ratios import compute_ratios
from bench.harness.report import rail_usage_table, summary_text, write_outputs

SIZES = [1024, 4 << 20, 16 << 20]


def series(algbw, runs_tx=None, status="ok"):
    return {"status": status, "reason": "" if status == "ok" else "rank 1 exit 1: boom",
            "results": [{"bytes": b, "algbw_gbps": v, "time_us": b / (v * 1e3), "check": "ok"}
                        for b, v in zip(SIZES, algbw)] if status != "failed" else [],
            "runs": [{"rail_tx_bytes": tx} for tx in (runs_tx or [])]}


def make_doc():
    ser = {
        "nezha-adaptive": series([0.010, 0.085, 0.088], [[600, 400], [300, 100]]),
        "nezha-single": series([0.010, 0.044, 0.045], [[1000, 0]]),
        "gloo-mptcp": series([0, 0, 0], status="failed"),
        "ceiling": {"status": "theoretical", "results": constant_series(SIZES, ceiling_algbw_gbps([500, 500], 4), 4)},
    }
    for name, s in ser.items():
        s["name"] = name
    scen = {"name": "homogeneous", "rates_mbit": [500, 500], "best_rail": 0, "sizes": SIZES, "series": ser,
            "ceiling_algbw_gbps": ceiling_algbw_gbps([500, 500], 4)}
    scen["ratios"] = compute_ratios({n: s["results"] for n, s in ser.items()}, SIZES)
    hw = {"cpu_model": "Test CPU", "cores": 2, "kernel": "6.1", "setup": "namespaces", "loadavg_start": [1.0, 2.0, 3.0]}
    return {"mode": "quick", "ranks": 4, "started": "2026-01-01T00:00:00+00:00", "hardware": hw,
            "note": "busy", "scenarios": [scen], "goals": evaluate_all({"homogeneous": scen["ratios"]})}


def test_rail_usage_sums_runs():
    lines = rail_usage_table(make_doc()["scenarios"][0]).splitlines()
    assert lines[2].split() == ["nezha-adaptive", "64%", "36%", "0.00"]
    assert lines[3].split() == ["nezha-single", "100%", "0%", "0.00"]
    assert len(lines) == 4  # series without runs are left out


def test_summary_mentions_hardware_failures_ratios_and_goals():
    text = summary_text(make_doc())
    assert "Test CPU, 2 cores, kernel 6.1; namespaces" in text
    assert "gloo-mptcp: FAILED: rank 1 exit 1: boom" in text
    assert "note: busy" in text
    # 4 MiB: 0.085 / 0.044
    assert "1.93x" in text
    bw = next(line for line in text.splitlines() if line.startswith(">= 1.9x best single rail"))
    assert bw.rstrip().endswith("PASS")  # 1.93 and 1.96 at 4M/16M


def test_write_outputs_timestamped_and_latest(tmp_path):
    doc = make_doc()
    written = []

    def fake_plot(_doc, path):
        written.append(path)
        with open(path, "wb") as f:
            f.write(b"png")

    paths = write_outputs(doc, str(tmp_path), "20260101T000000Z", plot_fn=fake_plot)
    assert sorted(paths) == [".json", ".png", ".txt"]
    assert json.loads((tmp_path / "latest.json").read_text())["mode"] == "quick"
    assert (tmp_path / "bench-20260101T000000Z.txt").read_text() == (tmp_path / "latest.txt").read_text()
    assert written == [str(tmp_path / "bench-20260101T000000Z.png")]
    assert not list(tmp_path.glob("*.tmp"))


def test_plot_writes_png(tmp_path):
    from bench import plot

    out = tmp_path / "x.png"
    plot.plot(make_doc(), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chaos_text_reports_outcome_stall_and_rail_share_per_phase():
    tx = lambda r0, r1: [[r0, r1], [0, 0]]  # noqa: E731 (two hosts, the second idle)
    events = {"start_tx": tx(0, 0), "cut_tx": tx(70, 30), "restore_tx": tx(170, 30), "end_tx": tx(240, 60)}
    metrics = {"failed": False, "failed_after_cut_s": None, "stall_s": 1.234, "algbw_before_gbps": 0.05,
               "algbw_during_cut_gbps": 0.04, "algbw_after_restore_gbps": 0.05, "ops_total": 42}
    chaos = {"rates_mbit": [800, 300], "cut_rail": 1, "cut_host": 1, "gloo_timeout_ms": 10000,
             "timeline": {"cut_at": 10, "restore_at": 20, "bytes": 1 << 24, "loop_seconds": 30},
             "series": {"gloo-mptcp": {"status": "ok", "metrics": metrics, "events": events},
                        "nezha-adaptive": {"status": "skipped", "reason": "no loop mode"}}}
    doc = {**make_doc(), "scenarios": [], "chaos": chaos}
    doc.pop("goals")
    text = summary_text(doc)
    row = next(line for line in text.splitlines() if line.startswith("gloo-mptcp"))
    assert row.split()[1:3] == ["survived", "1.23s"]
    assert row.split()[-1] == "30%/0%/30%"
    assert "nezha-adaptive: SKIPPED: no loop mode" in text
    assert "=== goals ===" not in text


def test_summary_names_the_tcp_congestion_control_the_bed_ran():
    # It changes what a long loop measures (BBR's PROBE_RTT every 10 s), so the report says it.
    doc = make_doc()
    doc["hardware"]["tcp_congestion_control"] = "bbr"
    assert "kernel 6.1 (TCP congestion control bbr); namespaces" in summary_text(doc)


def test_tcp_cc_outside_the_namespace_allowed_list_is_refused(monkeypatch, capsys):
    import pytest
    from bench import run_bench
    from bench.harness import hostinfo

    monkeypatch.setattr(hostinfo, "allowed_tcp_congestion_controls", lambda: ["reno", "bbr"])
    with pytest.raises(SystemExit) as e:
        run_bench.parse_args(["--tcp-cc", "cubic"])
    assert e.value.code == 2
    assert "--tcp-cc: 'cubic'" in capsys.readouterr().err
    assert run_bench.parse_args(["--tcp-cc", "reno"]).tcp_cc == "reno"
    assert hostinfo.collect("reno")["tcp_congestion_control"] == "reno"


def test_nccl_bench_refuses_a_tcp_cc_outside_the_allowed_list(monkeypatch, capsys):
    import pytest
    from bench import run_nccl_bench
    from bench.harness import hostinfo

    monkeypatch.setattr(hostinfo, "allowed_tcp_congestion_controls", lambda: ["reno", "bbr"])
    monkeypatch.setattr("sys.argv", ["run_nccl_bench.py", "--tcp-cc", "cubic"])
    with pytest.raises(SystemExit) as e:
        run_nccl_bench.main()
    assert e.value.code == 2
    assert "--tcp-cc: 'cubic'" in capsys.readouterr().err


def test_nccl_bench_refuses_a_fault_repeat_below_one(monkeypatch, capsys):
    import pytest
    from bench import run_nccl_bench

    for bad in ("0", "-2"):
        monkeypatch.setattr("sys.argv", ["run_nccl_bench.py", "--fault", "gray", "--fault-repeat", bad])
        with pytest.raises(SystemExit) as e:
            run_nccl_bench.main()
        assert e.value.code == 2
        assert f"--fault-repeat: must be at least 1, not {bad}" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["run_nccl_bench.py", "--fault", "smoke"])
    with pytest.raises(SystemExit) as e:
        run_nccl_bench.main()
    assert e.value.code == 2
    assert "--fault: invalid choice: 'smoke'" in capsys.readouterr().err
