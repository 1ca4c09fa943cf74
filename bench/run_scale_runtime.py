#!/usr/bin/env python3
"""The runtime at 8-64 ranks on the test bed (make bench-scale-runtime; root; bench/README.md,
"Runtime at scale, as measured"): runs runtime/tests/testbed/run_scale.sh at each N, judges the
measurements against the scale targets (PASS/MISS) and the simulator's committed prediction
(bench/sim/scale_predict.py), writes results/scale-runtime-<stamp>.{json,txt} (latest-scale-runtime.*)
and the README's scale-runtime block.

    /usr/bin/python3 -m bench.run_scale_runtime [--ranks 8,16,32,64] [--bench build/runtime/nezha-bench]
        [--prediction bench/results/latest-scale-prediction.json] [--out bench/results] [--readme bench/README.md]

Rank counts (and knob sets, --job-env) not run this time keep their last measured point (from latest-scale-runtime.json),
so 8 and 16 can be measured first and 32/64 added later; each point says when and under what load
it was measured.
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys

from .harness.readme_block import rewrite_block
from .harness.results import DEFAULT_DIR, latest_name, write_result
from .sim.scale_predict import failover_recorded_posthoc

KIND = "scale-runtime"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(REPO, "runtime", "tests", "testbed", "run_scale.sh")
TESTBED = os.path.join(REPO, "hack", "testbed.sh")

# The scale targets (bench/README.md, "Runtime at scale, as measured").
STARTUP_MAX_S = 10.0
RSS_MAX_BYTES = 64 << 20
FAILOVER_AGREED_MAX_S = 1.0
CUT_LOOP_BYTES = 1 << 20  # the cut phase's operation (bench/harness/scale_run.py phase_cut)
# runtime/README.md, NEZHA_PEER_SILENCE_MS: with every rail to a peer gone, every rank errors
# "well within 1 s"; a killed rank is that case for each of its peers.
KILL_ERROR_MAX_S = 1.0


def sockets_bound(n, rails):
    """Sockets per rank the target allows: 4 ceil(log2 N) per rail (ring neighbours, recursive
    doubling/halving partners, tree parent and children, dissemination neighbours). What alltoall
    asks for on top is not counted: the steady phase runs no alltoall."""
    return rails * 4 * math.ceil(math.log2(n))


def parse_ranks(text):
    try:
        ranks = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise SystemExit(f"--ranks: want comma-separated rank counts like 8,16, got {text!r}")
    bad = [n for n in ranks if n % 4 or n < 8 or n > 256]
    if not ranks or bad:
        raise SystemExit(f"--ranks: every rank count must be a multiple of 4 in 8..256 (4 ranks per bed host), got {text!r}")
    return ranks


def run_one(n, bench, work_dir, job_env):
    """Runs the scenario at N; returns its measurements with the scenario's verdict and log."""
    out = os.path.join(work_dir, f"scale-n{n}.json")
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run(["bash", SCENARIO, bench, TESTBED, str(n), out], capture_output=True, text=True,
                       env={**os.environ, "SCALE_JOB_ENV": job_env})
    sys.stderr.write(p.stderr)
    if not os.path.exists(out):
        raise SystemExit(f"run_scale.sh at N={n} wrote no measurements (exit {p.returncode})")
    with open(out) as f:
        m = json.load(f)
    m["scenario_passed"] = p.returncode == 0
    m["scenario_log"] = [ln for ln in p.stderr.splitlines() if ln.startswith("scale") or "PASS" in ln or "FAIL" in ln]
    m["measured_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    return m


def summarize(m):
    """The table's numbers for one N."""
    usage = m["steady"]["usage"]
    ar4m = [r for r in m["collectives"]["allreduce"]["rows"] if r["bytes"] == 4 << 20]
    kill = [s for s in m["kill"]["exit_after_kill_s"] if s is not None]
    started = all(c == 0 for c in m["startup"]["rc"])  # a start-up that failed has no start-up time
    failed = [v["error"] for v in m["collectives"].values() if v["error"]]
    return {"raw": m, "ranks": m["ranks"], "hosts": m["hosts"], "startup_s": m["startup"]["seconds"] if started else None,
            "collective_error": failed[0] if failed else "",
            "sockets_max": max((u["sockets"] for u in usage), default=None),
            "threads_max": max((u["threads"] for u in usage), default=None),
            "rss_max_bytes": max((u["rss_bytes"] for u in usage), default=None),
            "allreduce_1k_s": m["steady"].get("allreduce_1k_median_s"),
            "allreduce_4m_s": ar4m[0]["time_us"] / 1e6 if ar4m else None,
            "failover_agreed_s": m["cut"].get("agreed_s"),
            "kill_error_max_s": max(kill) if kill else None,
            "kill_errors": sorted(set(m["kill"]["errors"])),
            "knobs": " ".join(m.get("job_env", [])) or "defaults",
            "scenario_passed": m["scenario_passed"], "load": [m["load_before"][0], m["load_after"][0]],
            "measured_utc": m["measured_utc"]}


# Runs kept per (N, knobs) for the "in a row" line (bench/README.md: the 64-rank scenario is done
# when it passes three runs in a row from a fresh bed).
HISTORY_KEPT = 6


def run_record(s):
    """One run of one (N, knobs) point, as the history keeps it."""
    return {"measured_utc": s["measured_utc"], "scenario_passed": s["scenario_passed"], "load": s["load"],
            "startup_s": s["startup_s"], "failover_agreed_s": s["failover_agreed_s"],
            "kill_error_max_s": s["kill_error_max_s"]}


def passes_in_a_row(history):
    n = 0
    for r in reversed(history):
        if not r["scenario_passed"]:
            break
        n += 1
    return n


def dash(v):
    return "-" if v is None else str(v)


def verdict(ok):
    return "-" if ok is None else ("PASS" if ok else "MISS")


def judge(s, rails=2):
    n = s["ranks"]

    def le(v, bound):
        return None if v is None else v <= bound

    return {"startup": le(s["startup_s"], STARTUP_MAX_S), "sockets": le(s["sockets_max"], sockets_bound(n, rails)),
            "rss": le(s["rss_max_bytes"], RSS_MAX_BYTES), "failover": le(s["failover_agreed_s"], FAILOVER_AGREED_MAX_S),
            "kill": le(s["kill_error_max_s"], KILL_ERROR_MAX_S)}


def sim_error(s, pred_points, posthoc_failover_s=None):
    """Simulated / measured per quantity; posthoc_failover_s (a simulator value computed after the
    measurement, see scale_predict.failover_recorded_posthoc) is kept apart from the prediction."""
    p = next((x for x in pred_points if x["ranks"] == s["ranks"]), None)
    if p is None:
        return {}
    out = {}
    for key in ("allreduce_1k_s", "allreduce_4m_s", "failover_agreed_s"):
        if s.get(key):
            out[key] = {"predicted_s": p[key], "measured_s": s[key], "sim_over_measured": p[key] / s[key]}
    if posthoc_failover_s is not None and s.get("failover_agreed_s"):
        out["failover_posthoc"] = {"predicted_s": posthoc_failover_s, "measured_s": s["failover_agreed_s"],
                                   "sim_over_measured": posthoc_failover_s / s["failover_agreed_s"]}
    return out


def fmt(v, unit):
    if v is None:
        return "-"
    return {"s": f"{v:.2f} s", "ms": f"{v * 1e3:.1f} ms", "MiB": f"{v / (1 << 20):.1f} MiB"}[unit]


def report(points):
    L = ["Measured on the test bed (4 ranks per host, two rails of 50/50 Mbit/s per host; per N the max over "
         "ranks; targets: start-up <= 10 s, sockets per rank <= 4 ceil(log2 N) per rail, RSS <= 64 MiB, "
         "cut -> agreed failover <= 1 s, a killed rank's peers error within 1 s):", "",
         "| ranks | knobs | hosts | start-up | sockets / rank (bound) | threads / rank | RSS / rank | 1 KiB allreduce | "
         "4 MiB allreduce | cut -> agreed | kill -> every peer errored | scenario | load avg (before/after) | measured |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in points:
        j = s["judged"]
        L.append(f"| {s['ranks']} | {s['knobs']} | {s['hosts']} | {fmt(s['startup_s'], 's')} {verdict(j['startup'])} | "
                 f"{dash(s['sockets_max'])} ({sockets_bound(s['ranks'], 2)}) {verdict(j['sockets'])} | {dash(s['threads_max'])} | "
                 f"{fmt(s['rss_max_bytes'], 'MiB')} {verdict(j['rss'])} | {fmt(s['allreduce_1k_s'], 'ms')} | "
                 f"{fmt(s['allreduce_4m_s'], 'ms')} | {fmt(s['failover_agreed_s'], 'ms')} {verdict(j['failover'])} | "
                 f"{fmt(s['kill_error_max_s'], 'ms')} {verdict(j['kill'])} | "
                 f"{'PASS' if s['scenario_passed'] else 'FAIL'} | {s['load'][0]:.2f} / {s['load'][1]:.2f} | "
                 f"{s['measured_utc']} |")
    L += ["", "Simulator vs measured (prediction committed before the measurement: "
          "`results/latest-scale-prediction.json`), simulated / measured:", "",
          "| ranks | knobs | 1 KiB allreduce | 4 MiB allreduce | cut -> agreed failover | same, post-hoc simulator (*) |",
          "|---|---|---|---|---|---|"]
    for s in points:
        e = s["sim_error"]

        def cell(key, e=e):
            if key not in e:
                return "-"
            x = e[key]
            return f"{x['predicted_s'] * 1e3:.1f} / {x['measured_s'] * 1e3:.1f} ms ({(x['sim_over_measured'] - 1) * 100:+.0f} %)"

        L.append(f"| {s['ranks']} | {s['knobs']} | {cell('allreduce_1k_s')} | {cell('allreduce_4m_s')} | {cell('failover_agreed_s')} | "
                 f"{cell('failover_posthoc')} |")
    L += ["", "(*) Not a prediction: computed after the first measurement (`scale_predict.failover_recorded_posthoc`). "
          "The prediction priced detection + agreement + retire rounds of a 4 MiB operation; the run measures "
          "cut -> rank 0 recording the failover, which comes after the surviving rail finished its chunks of the "
          "cut loop's 1 MiB operation and the agreement round. The post-hoc column prices that quantity."]
    L += ["", "Runs per point, oldest first (scenario verdict, start-up, cut -> agreed, kill -> every peer errored, "
          "load average before/after), and how many of the latest passed in a row:", ""]
    for s in points:
        history = s.get("history") or [run_record(s)]  # a point not merged with earlier runs is its own
        runs = "; ".join(f"{r['measured_utc']} {'PASS' if r['scenario_passed'] else 'FAIL'} {fmt(r['startup_s'], 's')}, "
                         f"{fmt(r['failover_agreed_s'], 'ms')}, {fmt(r['kill_error_max_s'], 'ms')}, "
                         f"load {r['load'][0]:.2f} / {r['load'][1]:.2f}" for r in history)
        L.append(f"- N={s['ranks']} ({s['knobs']}): {passes_in_a_row(history)} in a row; {runs}")
    L += ["", "Errors the killed rank's peers exited with (distinct lines, first two per N), and a collective's "
          "error where one failed:", ""]
    for s in points:
        L.append(f"- N={s['ranks']} ({s['knobs']}): " + "; ".join(f"`{e}`" for e in s["kill_errors"][:2]))
        if s.get("collective_error"):
            L.append(f"  - a collective failed: `{s['collective_error']}`")
    return "\n".join(L) + "\n"


def previous_points(out_dir):
    path = os.path.join(out_dir, latest_name(KIND, ".json"))
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)["points"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="8,16,32,64", help="rank counts to run; '' to run none and only "
                    "judge and report the kept points again")
    ap.add_argument("--job-env", default="", help="NEZHA_VAR=VALUE ... for every rank (a point of its own, "
                    "kept apart from the defaults' point at the same N)")
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "runtime", "nezha-bench"))
    ap.add_argument("--prediction", default=os.path.join(DEFAULT_DIR, latest_name("scale-prediction", ".json")))
    ap.add_argument("--suite", default=os.path.join(DEFAULT_DIR, "latest.json"),
                    help="the suite run the simulator is fitted to (for the post-hoc failover column)")
    ap.add_argument("--out", default=DEFAULT_DIR)
    ap.add_argument("--readme", default=os.path.join(REPO, "bench", "README.md"), help="'' for none")
    a = ap.parse_args(argv)
    ranks = parse_ranks(a.ranks) if a.ranks else []
    if ranks and not os.access(a.bench, os.X_OK):
        raise SystemExit(f"--bench: {a.bench} is not an executable nezha-bench (make build-runtime)")
    with open(a.prediction) as f:
        pred = json.load(f)["points"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    raw, points = {}, {}
    for kept in previous_points(a.out):
        p = summarize(kept["raw"])  # summarized again: the summary may be newer than the point
        p["history"] = kept.get("history") or [run_record(p)]
        points[(p["ranks"], p["knobs"])] = p
    work_dir = os.path.join(a.out, f"{KIND}-{stamp}-raw")
    if ranks:
        os.makedirs(work_dir, exist_ok=True)
    for n in ranks:
        m = run_one(n, a.bench, work_dir, a.job_env)
        raw[n] = m
        s = summarize(m)
        before = points.get((n, s["knobs"]), {}).get("history", [])
        s["history"] = (before + [run_record(s)])[-HISTORY_KEPT:]
        points[(n, s["knobs"])] = s
    with open(a.prediction) as f:
        pred_doc = json.load(f)
    suite = a.suite
    for (n, _), s in points.items():  # kept points are judged again: the judge may be newer than them
        posthoc = failover_recorded_posthoc(pred_doc, n, CUT_LOOP_BYTES, suite)
        s["judged"], s["sim_error"] = judge(s), sim_error(s, pred, posthoc)
    ordered = [points[k] for k in sorted(points, key=lambda k: (k[1] != "defaults", k))]
    text = report(ordered)
    write_result(a.out, KIND, stamp, {".json": {"points": ordered}, ".txt": text})
    if a.readme:
        rewrite_block(a.readme, KIND, "bench/run_scale_runtime.py", text)
    print(text)
    return 0 if all(raw[n]["scenario_passed"] for n in ranks) else 1


if __name__ == "__main__":
    sys.exit(main())
