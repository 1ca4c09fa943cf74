"""make bench's driver: the two passes' runs, and which result files a pass is judged on."""

import json
import os

import pytest

from bench import run_targets


def test_both_passes_run_the_same_mixes_and_the_second_trims_its_sweep():
    a = run_targets.parse_args(["--seed", "7", "--torch-python", "/venv/bin/python"])
    first, second = run_targets.plan(a, "bbr", "/res")
    assert (first["cc"], second["cc"]) == ("bbr", "reno")
    assert first["steps"]["suite"][:5] == ["bench.run_bench", "--seed", "7", "--kind", "bench"]
    assert "--tcp-cc" not in first["steps"]["suite"] and "--series" not in first["steps"]["suite"]
    s = second["steps"]["suite"]
    assert s[s.index("--seed") + 1] == "7" and s[s.index("--tcp-cc") + 1] == "reno"
    assert [s[i + 1] for i, x in enumerate(s) if x == "--series"] == list(run_targets.TARGET_SERIES)
    for p in (first, second):
        assert set(p["steps"]) == {"suite", "faults", "unshaped", "ddp"}
        assert "--profile" in p["steps"]["unshaped"]
    assert second["steps"]["ddp"][-2:] == ["--tcp-cc", "reno"]
    assert first["steps"]["unshaped"][first["steps"]["unshaped"].index("--out") + 1] == "/res"
    kinds = [x[x.index("--kind") + 1] for p in (first, second) for x in p["steps"].values()]
    assert len(kinds) == len(set(kinds))  # no run overwrites another's latest file


def test_without_torch_no_ddp_run_and_a_default_of_reno_runs_one_pass():
    a = run_targets.parse_args(["--seed", "1"])
    first, second = run_targets.plan(a, "reno", "/res")
    assert "ddp" not in first["steps"]
    assert second["steps"] == {} and "fill" in second["note"]
    only = run_targets.plan(run_targets.parse_args(["--sources", "suite,unshaped", "--quick"]), "bbr", "/res")
    assert all(set(p["steps"]) == {"suite", "unshaped"} for p in only)
    assert "--quick" in only[1]["steps"]["suite"] and "--sizes" in only[0]["steps"]["unshaped"]


def test_bad_sources_are_named():
    with pytest.raises(SystemExit):
        run_targets.parse_args(["--sources", "suite,chaos"])


def test_a_pass_is_judged_only_on_files_this_run_wrote(tmp_path):
    a = run_targets.parse_args(["--seed", "1"])
    passes = run_targets.plan(a, "bbr", "/res")
    fresh = tmp_path / "latest.json"
    fresh.write_text(json.dumps({"scenarios": []}))
    stale = tmp_path / "latest-bench-reno.json"
    stale.write_text(json.dumps({"scenarios": []}))
    os.utime(stale, (1000, 1000))
    got = run_targets.collect(passes, str(tmp_path), since=2000)
    assert got[0]["docs"]["suite"] == {"scenarios": []} and got[0]["docs"]["faults"] is None
    assert got[1]["files"]["suite"].endswith("latest-bench-reno.json") and got[1]["docs"]["suite"] is None
    # One pass for both columns: the second reads the first's files.
    one = run_targets.collect(run_targets.plan(a, "reno", "/res"), str(tmp_path), since=2000)
    assert one[1]["files"] == one[0]["files"]
