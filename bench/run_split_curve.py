#!/usr/bin/python3
"""Target D on the rail test bed: "the learned split is within 5 % of the best static
split after <= 50 operations (report the curve)". Needs root (network namespaces).

Per scenario (ranks, TBF rail rates per host), loops of 16 MiB allreduces with nezha-bench's loop
mode (every result checked on every rank), in --repeats rounds, each round:

- static sweep: one launch per candidate split (two rails: r0's share 0.60..0.85 step 0.05; three
  rails: the bandwidth-proportional split and its 6 neighbours moving 0.05 between two rails),
  pinned with NEZHA_TABLE (a one-entry table holding the split) and NEZHA_TUNE_INTERVAL=1000000
  (no agreement round, so no update, in the launch) — the adaptive policy's own code path with
  learning frozen; each op's reported split is checked against the pinned one;
- adaptive curve: one launch from a fresh start (the runtime's defaults: probe, no table, tuning
  every 5 ops with gain 0.6) long enough for --curve-ops ops; per op its time and split;
- control: the best static split so far, pinned, in a launch as long as the adaptive one and
  judged the same way (what the criterion gives a split that never moves: the noise floor).

The best static split is the candidate with the least median op time over all rounds; each
adaptive repeat's settle op is where its rolling median (5 ops) stays <= 1.05 x that time through
op --curve-ops (harness/split_curve.py has the exact definitions). PASS when every repeat of
every scenario settles by op 50. Writes split-curve-<stamp>.{json,txt,png}
and latest-split-curve.* to --out (bench/results).

  /usr/bin/python3 -m bench.run_split_curve [--scenario 800-300 --scenario 600-200-400 | --scenario all] [--repeats 3]
                     [--curve-ops 80] [--static-seconds 2.5] [--bytes 16M]
                     [--out bench/results] [--note TEXT]
"""

import argparse
import datetime
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from statistics import median

from .harness import hostinfo, results
from .harness import split_curve as sc
from .harness.chaos import validate_trace
from .harness.config import load_tunables
from .harness.launch import run_ranks
from .harness.sizes import parse_bytes
from .harness.testbed import Testbed
from .plot_split_curve import plot

BED = "nzbsc"  # the bench suite's prefix (nzb); nzb1 run_bench, nzb2 nccl, nzb4 ddp, nzb5 talb
# The adaptive launch runs curve_ops x (best static op time so far) x this + a second: it starts
# from the probe's split, slower than the best, and must still reach curve_ops ops.
ADAPTIVE_SLACK = 1.5


@dataclass(frozen=True)
class SplitScenario:
    name: str
    ranks: int
    rates_mbit: tuple[int, ...]


# Host rail sums stay <= 1.2 Gbit/s (the bed's notes: the 2 cores, not the rails, limit above).
SCENARIOS = {s.name: s for s in (SplitScenario("800-300", 2, (800, 300)),
                                 SplitScenario("600-200-400", 2, (600, 200, 400)),
                                 SplitScenario("800-300-4r", 4, (800, 300)))}
DEFAULT_SCENARIOS = ("800-300", "600-200-400")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] split-curve: {msg}", file=sys.stderr, flush=True)


def fmt_split(s) -> str:
    return "/".join(f"{x:.2f}" for x in s) if s else "n/a"


class Launcher:
    """Launches nezha-bench loop jobs on one bed and returns rank 0's trace."""

    def __init__(self, tun, bed: Testbed, scen: SplitScenario, nbytes: int, work: str):
        self.tun, self.bed, self.scen, self.nbytes, self.work = tun, bed, scen, nbytes, work
        self.rails = [f"r{k}" for k in range(len(scen.rates_mbit))]
        best = max(range(len(scen.rates_mbit)), key=lambda k: (scen.rates_mbit[k], -k))
        self.rdv_addr = bed.addr(0, best)
        self.port = tun.rendezvous_port + 700

    def run(self, tag: str, seconds: float, extra_env: dict) -> tuple[dict | None, str]:
        """(trace, "") or (None, reason)."""
        self.port += 1  # a fresh port per launch: the last job's sockets may be in TIME_WAIT
        trace_path = os.path.join(self.work, f"{tag}.trace.json")
        token = secrets.token_hex(32)
        env = {"NEZHA_RAILS": ",".join(f"{n}={n}:tcp" for n in self.rails), "NEZHA_POLICY": "adaptive",
               "NEZHA_WORLD_SIZE": str(self.scen.ranks), "NEZHA_RENDEZVOUS": f"{self.rdv_addr}:{self.port}",
               "NEZHA_JOB_TOKEN": token, **extra_env}
        argv = [self.tun.nezha_bench, "--quiet", "--max-bytes", str(self.nbytes), "--loop-seconds",
                f"{seconds:.1f}", "--trace", trace_path]
        res = run_ranks(self.bed, self.scen.ranks, lambda _r: argv, lambda r: {**env, "NEZHA_RANK": str(r)},
                        seconds + 60, self.work, tag)
        if not res.ok():
            return None, res.failure()
        try:
            with open(trace_path) as f:
                trace = json.load(f)
            validate_trace(trace, trace_path)
        except (OSError, ValueError) as e:
            return None, f"no usable trace from rank 0 ({e})"
        if trace.get("check") != "ok" or trace.get("error"):
            return None, f"check {trace.get('check')}, error {trace.get('error')}"
        return trace, ""


def run_scenario(tun, scen: SplitScenario, a, work: str) -> dict:
    cands = sc.candidate_splits(scen.rates_mbit)
    rails = [f"r{k}" for k in range(len(scen.rates_mbit))]
    tables = {}
    for i, c in enumerate(cands):
        tables[c] = os.path.join(work, f"{scen.name}.pin{i}.table.json")
        with open(tables[c], "w") as f:
            json.dump(sc.pinned_table(rails, scen.ranks, a.bytes, c), f)
    static = {c: {"times_s": [], "launches": []} for c in cands}
    curves, controls, failures = [], [], []
    log(f"{scen.name}: {scen.ranks} ranks, rails {'/'.join(map(str, scen.rates_mbit))} Mbit/s, "
        f"{len(cands)} static splits x {a.static_seconds:.1f} s + 1 adaptive curve, x {a.repeats} rounds")
    with Testbed(tun.testbed_sh, BED, scen.ranks, len(rails), scen.rates_mbit, mptcp=False, tcp_cc=a.tcp_cc) as bed:
        run = Launcher(tun, bed, scen, a.bytes, work)
        for rnd in range(a.repeats):
            order = cands[rnd % len(cands):] + cands[:rnd % len(cands)]  # who goes first rotates
            for c in order:
                env = {"NEZHA_TABLE": tables[c], "NEZHA_TUNE_INTERVAL": str(sc.FROZEN_TUNE_INTERVAL)}
                trace, why = run.run(f"{scen.name}.static-{fmt_split(c).replace('/', '-')}.{rnd}", a.static_seconds, env)
                if trace is None:
                    failures.append(f"static {fmt_split(c)} round {rnd + 1}: {why}")
                    log(f"  static {fmt_split(c)} FAILED: {why}")
                    continue
                times = sc.static_times([op[1] for op in trace["ops"]])
                ok = sc.pinned_ok(trace["op_split"], c)
                static[c]["launches"].append({"round": rnd, "ops": len(trace["ops"]), "pinned_ok": ok,
                                              "durations_us": [op[1] for op in trace["ops"]]})
                if ok:
                    static[c]["times_s"].extend(times)
                else:
                    failures.append(f"static {fmt_split(c)} round {rnd + 1}: the split moved "
                                    f"({fmt_split(trace['op_split'][-1])}); launch not counted")
                log(f"  static {fmt_split(c)} round {rnd + 1}: {len(times)} timed ops, median "
                    f"{median(times) * 1e3 if times else float('nan'):.1f} ms{'' if ok else ' SPLIT MOVED'}")
            timed = {c: v["times_s"] for c, v in static.items() if v["times_s"]}
            if not timed:
                failures.append(f"round {rnd + 1}: no static split ran; adaptive skipped")
                continue
            _, best_so_far = sc.best_static(timed)
            seconds = a.curve_ops * best_so_far * ADAPTIVE_SLACK + 1
            trace, why = run.run(f"{scen.name}.adaptive.{rnd}", seconds, {})
            if trace is None:
                failures.append(f"adaptive round {rnd + 1}: {why}")
                log(f"  adaptive round {rnd + 1} FAILED: {why}")
                continue
            curves.append({"round": rnd, "loop_seconds": round(seconds, 1),
                           "times_s": [op[1] / 1e6 for op in trace["ops"]], "splits": trace["op_split"]})
            log(f"  adaptive round {rnd + 1}: {len(trace['ops'])} ops, start split "
                f"{fmt_split(trace['op_split'][0])}, last {fmt_split(trace['op_split'][-1])}")
            # Control: the best static split so far, pinned, as long as the adaptive run. The sweep's
            # launches are short; this shows what the same criterion gives a split that never moves.
            best_c, _ = sc.best_static(timed)
            env = {"NEZHA_TABLE": tables[best_c], "NEZHA_TUNE_INTERVAL": str(sc.FROZEN_TUNE_INTERVAL)}
            trace, why = run.run(f"{scen.name}.control.{rnd}", seconds, env)
            if trace is None or not sc.pinned_ok(trace["op_split"], best_c):
                failures.append(f"control round {rnd + 1}: {why or 'the split moved'}")
                continue
            controls.append({"round": rnd, "split": list(best_c), "times_s": [op[1] / 1e6 for op in trace["ops"]],
                             "splits": trace["op_split"]})
            log(f"  control (static {fmt_split(best_c)} pinned) round {rnd + 1}: {len(trace['ops'])} ops")
    return judge_scenario(scen, a, cands, static, curves, failures, controls)


def judge_scenario(scen: SplitScenario, a, cands, static: dict, curves: list, failures: list,
                   controls: list = ()) -> dict:
    out = {"name": scen.name, "ranks": scen.ranks, "rates_mbit": list(scen.rates_mbit), "failures": failures,
           "static": [{"split": list(c), "median_s": median(v["times_s"]) if v["times_s"] else None,
                       "timed_ops": len(v["times_s"]), "launches": v["launches"]} for c, v in static.items()],
           "curves": curves, "controls": list(controls)}
    timed = {c: v["times_s"] for c, v in static.items() if v["times_s"]}
    if not timed or not curves:
        out.update(best=None, verdict="NOT RUN")
        return out
    best_split, best_s = sc.best_static(timed)
    out["best"] = {"split": list(best_split), "median_s": best_s,
                   "edge_of_sweep": best_split in (cands[0], cands[-1]) and len(scen.rates_mbit) == 2}
    for cv in [*curves, *controls]:
        n = min(a.curve_ops, len(cv["times_s"]))
        cv["judged"] = sc.judge_curve(cv["times_s"][:n], cv["splits"][:n], best_s, best_split)
        cv["judged"]["short"] = n < a.curve_ops
    med = sc.per_op_median([cv["times_s"][:a.curve_ops] for cv in curves])
    out["median_curve"] = {"times_s": med, "settle_op": sc.settle_op(med, best_s)}
    settles = [cv["judged"]["settle_op"] for cv in curves]
    out["settle_ops"] = settles
    out["control_settle_ops"] = [cv["judged"]["settle_op"] for cv in controls]
    out["verdict"] = sc.verdict(settles) if len(curves) == a.repeats else \
        ("MISS" if sc.verdict(settles) == "MISS" else "INCOMPLETE")
    return out


def _ratio(x) -> str:
    return "n/a" if x is None else f"{x:.3f}x"


def _dist(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def report(doc: dict) -> str:
    r, d = _ratio, _dist
    info, args = doc["hardware"], doc["args"]
    lines = [f"Learned split vs the best static split on the rail test bed, started {doc['started']}",
             f"hardware: {info['cpu_model']}, {info['cores']} cores, kernel {info['kernel']}"
             + (f" (TCP congestion control {info['tcp_congestion_control']})" if "tcp_congestion_control" in info else "")
             + "; hosts are network namespaces, rails TBF-shaped veth",
             f"load average at start {', '.join(f'{x:.2f}' for x in info['loadavg_start'])}, "
             f"at end {', '.join(f'{x:.2f}' for x in info['loadavg_end'])}",
             f"{args['bytes'] >> 20} MiB allreduce loops, every result checked; {args['repeats']} rounds of "
             f"(static sweep, {args['static_seconds']:.1f} s per split, first {sc.STATIC_SKIP_OPS} ops dropped; "
             f"then one adaptive run from a fresh start, first {args['curve_ops']} ops judged)",
             f"settle op: first op from which the rolling median of {sc.WINDOW} ops stays <= "
             f"{1 + sc.TOLERANCE:.2f} x the best static median; goal <= {sc.GOAL_OPS} ops in every repeat"]
    if doc.get("note"):
        lines.append(f"note: {doc['note']}")
    for s in doc["scenarios"]:
        lines += ["", f"=== {s['name']}: {s['ranks']} ranks, rails {'/'.join(map(str, s['rates_mbit']))} Mbit/s ==="]
        lines.append("  static splits (pinned: NEZHA_TABLE + NEZHA_TUNE_INTERVAL=1000000), median op time:")
        best = s.get("best") or {}
        for st in s["static"]:
            mark = "  <- best" if best and st["split"] == best["split"] else ""
            pinned = all(x["pinned_ok"] for x in st["launches"]) if st["launches"] else False
            t = f"{st['median_s'] * 1e3:7.1f} ms" if st["median_s"] else "    n/a   "
            lines.append(f"    {fmt_split(st['split']):>16s}  {t}  ({st['timed_ops']} ops, "
                         f"{'pinned ok' if pinned else 'NOT pinned'}){mark}")
        if best.get("edge_of_sweep"):
            lines.append("    (the best split is at the edge of the sweep: the true best static may lie outside it)")
        lines.append("  adaptive from a fresh start (probe, no table, NEZHA_TUNE_INTERVAL=5, NEZHA_TUNE_GAIN=0.6):")
        for i, cv in enumerate(s["curves"]):
            j = cv.get("judged")
            if not j:
                continue
            lines.append(f"    repeat {i + 1}: {j['ops']} ops{' (SHORT)' if j['short'] else ''}; start split "
                         f"{fmt_split(cv['splits'][0])}; settled at op {j['settle_op'] or 'never'}; "
                         f"rolling median at op {sc.GOAL_OPS} {r(j['ratio_at_goal'])}, at the end "
                         f"{r(j['ratio_at_end'])} of best; split at op {sc.GOAL_OPS} {fmt_split(j['split_at_goal'])} "
                         f"(distance {d(j['distance_at_goal'])}), at the end {fmt_split(j['split_at_end'])} "
                         f"(distance {d(j['distance_at_end'])})")
        for i, cv in enumerate(s.get("controls", [])):
            j = cv["judged"]
            lines.append(f"    control {i + 1} (static {fmt_split(cv['split'])} pinned, as long as the adaptive run, "
                         f"judged the same way): {j['ops']} ops; settled at op {j['settle_op'] or 'never'}; rolling "
                         f"median at op {sc.GOAL_OPS} {r(j['ratio_at_goal'])}, at the end {r(j['ratio_at_end'])} of best")
        if s.get("median_curve"):
            lines.append(f"    per-op median over repeats: settled at op {s['median_curve']['settle_op'] or 'never'}")
        for f in s["failures"]:
            lines.append(f"  problem: {f}")
        worst = max((x for x in s.get("settle_ops", []) if x is not None), default=None)
        never = any(x is None for x in s.get("settle_ops", []))
        lines.append(f"  {s['verdict']:<5} learned split within 5 % of the best static split after <= {sc.GOAL_OPS} ops: "
                     f"settle ops {s.get('settle_ops', [])}, worst {'never' if never else worst}")
    lines += ["", f"overall: {doc['verdict']}"]
    return "\n".join(lines) + "\n"


def overall(verdicts: list[str]) -> str:
    if not verdicts or all(v == "NOT RUN" for v in verdicts):
        return "NOT RUN"
    if "MISS" in verdicts:
        return "MISS"
    return "PASS" if all(v == "PASS" for v in verdicts) else "INCOMPLETE"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", choices=[*SCENARIOS, "all"],
                    help=f"default {', '.join(DEFAULT_SCENARIOS)}; repeatable; 'all' adds 800-300-4r")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--curve-ops", type=int, default=80)
    ap.add_argument("--static-seconds", type=float, default=2.5)
    ap.add_argument("--bytes", default="16M")
    ap.add_argument("--out", default=results.DEFAULT_DIR)
    ap.add_argument("--note", default="")
    ap.add_argument("--tcp-cc", default="", metavar="ALGO",
                    help="TCP congestion control of the bed's hosts (hack/testbed.sh --tcp-cc; default: the machine's). "
                         "The machine's BBR makes one op per 10 s slow (PROBE_RTT), which the 5-op median sees")
    a = ap.parse_args(argv)
    if hostinfo.tcp_cc_error(a.tcp_cc):
        ap.error(hostinfo.tcp_cc_error(a.tcp_cc))
    a.bytes = parse_bytes("--bytes", a.bytes)
    names = list(SCENARIOS) if "all" in (a.scenario or []) else (a.scenario or list(DEFAULT_SCENARIOS))
    if not (1 <= a.repeats <= 10 and sc.GOAL_OPS <= a.curve_ops <= 1000 and a.static_seconds > 0):
        ap.error(f"--repeats 1..10, --curve-ops {sc.GOAL_OPS}..1000, --static-seconds > 0")
    tun = load_tunables()
    if not os.access(tun.nezha_bench, os.X_OK):
        ap.error(f"{tun.nezha_bench} not built (make build-runtime)")
    info = hostinfo.collect(a.tcp_cc)
    started = datetime.datetime.now(datetime.timezone.utc)
    work = os.path.join("/tmp", f"nzsc-{started:%Y%m%dT%H%M%S}")
    os.makedirs(work, exist_ok=True)
    t0 = time.monotonic()
    scenarios = [run_scenario(tun, SCENARIOS[n], a, work) for n in names]
    info["loadavg_end"] = list(os.getloadavg())
    doc = {"schema": "nezha-split-curve/v1", "started": f"{started:%Y-%m-%dT%H:%M:%SZ}", "hardware": info,
           "args": {"repeats": a.repeats, "curve_ops": a.curve_ops, "static_seconds": a.static_seconds,
                    "bytes": a.bytes, "window": sc.WINDOW, "tolerance": sc.TOLERANCE, "goal_ops": sc.GOAL_OPS,
                    "static_skip_ops": sc.STATIC_SKIP_OPS},
           "bed_seconds": round(time.monotonic() - t0, 1), "note": a.note, "scenarios": scenarios,
           "verdict": overall([s["verdict"] for s in scenarios])}
    text = report(doc)
    print(text)
    paths = results.write_result(a.out, "split-curve", f"{started:%Y%m%dT%H%M%SZ}",
                                 {".json": doc, ".txt": text, ".png": lambda path: plot(doc, path)})
    log(f"wrote {', '.join(paths.values())} and their latest-split-curve.* copies "
        f"({doc['bed_seconds']:.0f} s on the bed)")
    if any(s["failures"] for s in scenarios):
        log(f"rank logs and traces kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if doc["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
