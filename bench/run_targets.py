#!/usr/bin/python3
"""The host-default targets on the machine's own congestion control and on reno, side by side
(`make bench`; needs root). bench/README.md, "Targets on the host default and on reno".

Two passes, each the same four runs with the bed's hosts on one congestion control:

  pass          suite (run_bench)              faults (run_bench --chaos)    unshaped          ddp
  host default  every series, kind bench       nezha + control, kind faults  kind unshaped     kind ddp
  second (reno) the targets' 3 series,         every chaos series,           unshaped-reno     ddp-reno
                kind bench-reno                kind chaos

Both passes draw the same random rail mixes (one seed). The second pass's sweep runs only the
series the targets judge (nezha-adaptive, nezha-single, gloo-best-rail) to keep `make bench`
bounded; the host-default pass is the full suite (latest.json, the README's suite block). When the
machine's default already is the second one, one pass fills both columns. Then every target is
judged from the pass's result files and printed in one table (harness/targets_report.py), written
to results/targets-<stamp>.{json,txt} and latest-targets.*, and bench/README.md's bench-targets
block is rewritten from it. A run that fails leaves its targets NOT RUN; the others are judged.

  /usr/bin/python3 -m bench.run_targets [--second-cc reno] [--seed N] [--torch-python PATH] [--dry-run]
  /usr/bin/python3 -m bench.run_targets --report [results/latest-targets.json]   # judge again, run nothing
"""

import argparse
import datetime
import json
import os
import secrets
import subprocess
import sys
import time

from .harness import hostinfo, results
from .harness.chaos import Timeline
from .harness.config import load_tunables
from .harness.targets import SOURCES
from .harness.targets_report import build, text, update_readme
from .run_bench import estimate_seconds, parse_args as parse_bench_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "bench", "README.md")
KIND = "targets"
TARGET_SERIES = ("nezha-adaptive", "nezha-single", "gloo-best-rail")
FAULT_SERIES = ("nezha-adaptive", "gloo-best-rail")
PROFILE_SIZE = "16M"
QUICK_RANDOM_MIXES = 1  # --quick: a smoke of the plumbing, not a measurement
QUICK_UNSHAPED_SIZES = "1M,16M"
UNSHAPED_ESTIMATE_S = 120  # ~1.5 min of sweep plus two profiled launches
DDP_ESTIMATE_S = 90  # two launches per series, three series, on a fresh bed


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] run_targets: {msg}", flush=True)


def pass_kinds(second: bool, cc: str) -> dict:
    """Result kinds of one pass (harness/results.py: latest-<kind>.json), by source."""
    if not second:
        return {"suite": "bench", "faults": "faults", "unshaped": "unshaped", "ddp": "ddp"}
    return {"suite": f"bench-{cc}", "faults": "chaos", "unshaped": f"unshaped-{cc}", "ddp": f"ddp-{cc}"}


def pass_steps(second: bool, cc: str, a, out: str) -> dict:
    """{source: argv (after python3 -m)} of one pass, for the sources in a.sources; a source
    without a step is not run (its targets are NOT RUN). out: the results directory."""
    kinds = pass_kinds(second, cc)
    cc_flag = ["--tcp-cc", cc] if second else []
    suite = ["bench.run_bench", "--seed", str(a.seed), "--kind", kinds["suite"], *cc_flag]
    if a.quick:
        suite += ["--quick", "--random", str(QUICK_RANDOM_MIXES)]
    if second:
        suite += [arg for s in TARGET_SERIES for arg in ("--series", s)]
    faults = ["bench.run_bench", "--chaos", "--kind", kinds["faults"], *cc_flag]
    if not second:
        faults += [arg for s in FAULT_SERIES for arg in ("--series", s)]
    unshaped = ["bench.run_unshaped", "--profile", PROFILE_SIZE, "--kind", kinds["unshaped"], "--out", out, *cc_flag]
    if a.quick:
        unshaped += ["--sizes", QUICK_UNSHAPED_SIZES]
    steps = {"suite": suite, "faults": faults, "unshaped": unshaped}
    if a.torch_python:
        steps["ddp"] = ["bench.run_ddp_bench", "--python", a.torch_python, "--kind", kinds["ddp"], "--out", out,
                        *cc_flag]
    return {s: argv for s, argv in steps.items() if s in a.sources}


def step_estimate_s(argv: list[str]) -> float:
    module, args = argv[0], argv[1:]
    if module == "bench.run_bench" and "--chaos" in args:
        loops = 6 if "--series" in args else 8  # the cut per series, then black hole and gray for two
        return loops * (Timeline().loop_seconds + 10)
    if module == "bench.run_bench":
        return estimate_seconds(parse_bench_args(args), load_tunables())
    return UNSHAPED_ESTIMATE_S if module == "bench.run_unshaped" else DDP_ESTIMATE_S


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--second-cc", default="reno", metavar="ALGO",
                    help="congestion control of the second pass (default reno)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the random rail mixes, both passes (default: fresh)")
    ap.add_argument("--torch-python", default="", metavar="PATH",
                    help="the torch venv's python for the DDP runs (make bench passes it); without it DDP is NOT RUN")
    ap.add_argument("--sources", default=",".join(SOURCES), metavar="LIST",
                    help=f"which runs of each pass (default all: {','.join(SOURCES)}); the others' targets are NOT RUN")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: quick suites with one random mix, unshaped at 1M and 16M only")
    ap.add_argument("--dry-run", action="store_true", help="print both passes' runs and the time estimate")
    ap.add_argument("--report", nargs="?", const="", metavar="JSON",
                    help="judge an earlier targets result again from its runs' files (default: latest-targets.json)")
    a = ap.parse_args(argv)
    if not a.second_cc:
        ap.error("--second-cc: want an algorithm name, e.g. reno")
    err = hostinfo.tcp_cc_error(a.second_cc)
    if err:
        ap.error(err.replace("--tcp-cc", "--second-cc"))
    a.sources = [x.strip() for x in a.sources.split(",") if x.strip()]
    bad = [x for x in a.sources if x not in SOURCES]
    if bad or not a.sources:
        ap.error(f"--sources: want some of {', '.join(SOURCES)}, got {bad[0] if bad else 'none'!r}")
    if a.seed is None:
        a.seed = secrets.randbelow(1 << 31)
    if a.seed < 0:
        ap.error(f"--seed: want a non-negative integer, got {a.seed}")
    return a


def plan(a, host_cc: str, out: str) -> list[dict]:
    """The passes: label, cc, whether it is the second, its steps (none when it reuses the first)."""
    first = {"label": "host default", "cc": host_cc, "second": False, "steps": pass_steps(False, host_cc, a, out)}
    second = {"label": a.second_cc, "cc": a.second_cc, "second": True, "steps": pass_steps(True, a.second_cc, a, out)}
    if host_cc == a.second_cc:
        second.update(steps={}, second=False,
                      note=f"the machine's default is {host_cc}: the host-default pass's runs fill this column too")
    return [first, second]


def load(path: str, since: float) -> dict | None:
    """A run's result document, or None when it is missing or older than this run (a run that
    failed before writing must not be judged on a previous run's file)."""
    try:
        if os.path.getmtime(path) < since:
            return None
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def collect(passes: list[dict], results_dir: str, since: float) -> list[dict]:
    out = []
    for i, p in enumerate(passes):
        # A pass that reuses the first (the default already is the second congestion control) is
        # not "second" and so reads the first's files.
        kinds = pass_kinds(p["second"], p["cc"])
        files = {s: os.path.join(results_dir, results.latest_name(kinds[s], ".json")) for s in SOURCES}
        entry = {"label": p["label"], "cc": p["cc"], "files": files,
                 "docs": {s: load(files[s], since) for s in SOURCES}}
        if p.get("note"):
            entry["note"] = p["note"]
        out.append(entry)
    return out


def write(doc: dict, results_dir: str, stamp: str) -> None:
    body = text(doc)
    results.write_result(results_dir, KIND, stamp, {".json": doc, ".txt": body})
    print(body, end="")
    if os.path.realpath(results_dir) == os.path.realpath(results.DEFAULT_DIR):
        update_readme(README, doc)
        log(f"README: {os.path.relpath(README)} targets block rewritten")


def rereport(path: str, results_dir: str) -> int:
    path = path or os.path.join(results_dir, results.latest_name(KIND, ".json"))
    try:
        with open(path) as f:
            old = json.load(f)
        passes = [{"label": p["label"], "cc": p["cc"], "note": p.get("note"),
                   "files": {s["source"]: s["file"] for s in p["sources"]},
                   "docs": {s["source"]: load(s["file"], 0) if s["ran"] and s.get("file") else None
                            for s in p["sources"]}} for p in old["passes"]]
    except (OSError, ValueError, KeyError) as e:
        print(f"run_targets.py: --report: {path}: {e}", file=sys.stderr)
        return 2
    doc = {**build(passes), **{k: old[k] for k in ("started", "finished", "duration_s", "seed", "steps") if k in old}}
    write(doc, results_dir, old.get("stamp") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        tun = load_tunables()
    except ValueError as e:
        print(f"run_targets.py: {e}", file=sys.stderr)
        return 2
    if a.report is not None:
        return rereport(a.report, tun.results_dir)
    host_cc = hostinfo.collect()["tcp_congestion_control"]
    passes = plan(a, host_cc, tun.results_dir)
    total = 0.0
    for p in passes:
        for source, argv_ in p["steps"].items():
            est = step_estimate_s(argv_)
            total += est
            log(f"{p['label']} ({p['cc']}), {source}: python3 -m {' '.join(argv_)} (~{est / 60:.1f} min)")
        if p.get("note"):
            log(f"{p['label']}: {p['note']}")
        if "ddp" in a.sources and "ddp" not in p["steps"] and not p.get("note"):
            log(f"{p['label']}: no DDP run (--torch-python not given): its target is NOT RUN")
    log(f"random rail mixes: seed {a.seed}; estimated {total / 60:.0f} min in all")
    if a.dry_run:
        return 0
    if os.geteuid() != 0:
        print("run_targets.py: needs root (network namespaces); use `make bench`", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    since = time.time()
    steps, failed = [], []
    for p in passes:
        for source, argv_ in p["steps"].items():
            t0 = time.monotonic()
            log(f"{p['label']} ({p['cc']}), {source}: starting")
            rc = subprocess.run([sys.executable, "-m", *argv_], cwd=REPO).returncode
            steps.append({"pass": p["label"], "source": source, "argv": argv_, "rc": rc,
                          "seconds": round(time.monotonic() - t0, 1)})
            if rc != 0:
                failed.append(f"{p['label']} {source} (exit {rc})")
    finished = datetime.datetime.now(datetime.timezone.utc)
    doc = {**build(collect(passes, tun.results_dir, since)), "started": started.isoformat(timespec="seconds"),
           "finished": finished.isoformat(timespec="seconds"),
           "duration_s": round((finished - started).total_seconds(), 1), "seed": a.seed, "steps": steps,
           "stamp": started.strftime("%Y%m%dT%H%M%SZ")}
    print()
    write(doc, tun.results_dir, doc["stamp"])
    if failed:
        log(f"runs that failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
