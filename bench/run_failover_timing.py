#!/usr/bin/python3
"""The failure-timing targets (bench/README.md, "Failure timing") on the rail test bed (needs root, namespaces).

  all rails down -> the same clear error on every rank <= 1 s
  restore        -> the rail carries its share again <= 1 s

Ranks are nezha-bench loop jobs (64 MiB allreduce, every result checked), one per bed host, on
TBF-shaped rails (default 800/300 Mbit/s per host). "All down" cuts every rail of the last host
(switch ports down: only that host sees carrier loss, its peers see silence) and times each
rank's exit from just before the last cut; "restore" cuts the slowest rail of the last host,
restores it and times the rail's return from just before the restore. Each repeats --repeats
times; the worst repeat is judged. --baseline runs the same with NEZHA_PEER_SILENCE_MS=0 and
NEZHA_WAVE_BYTES=0 (no heartbeats, re-admission at op boundaries only: the runtime before these
targets were worked on) in the same run. Writes failover-timing-<stamp>.{json,txt}
and latest-failover-timing.* to --out (bench/results).

  /usr/bin/python3 -m bench.run_failover_timing [--ranks 2] [--rates 800,300] [--bytes 64M] [--repeats 3] [--baseline]
                         [--out bench/results] [--note TEXT]
"""

import argparse
import datetime
import json
import os
import secrets
import subprocess
import sys
import threading
import time

from .harness import hostinfo
from .harness.chaos import share_back_after_restore
from .harness.config import load_tunables
from .harness.failover_timing import (ALL_DOWN_GOAL_S, SHARE_BACK_GOAL_S, breakdown_restore,
                                     judge_all_down, verdict)
from .harness.results import DEFAULT_DIR, write_result
from .harness.sizes import parse_bytes
from .harness.testbed import Testbed

BED = "nzbft"
BASELINE_ENV = {"NEZHA_PEER_SILENCE_MS": "0", "NEZHA_WAVE_BYTES": "0"}


def log(msg: str) -> None:
    print(f"failover-timing: {msg}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, a, tun, bed: Testbed, work: str):
        self.a, self.tun, self.bed, self.work = a, tun, bed, work
        self.port = tun.rendezvous_port + 300
        self.rails = [f"r{k}" for k in range(len(a.rates))]

    def launch(self, tag: str, seconds: int, extra_env: dict, events) -> list[dict]:
        """Runs the loop job; `events(t0)` (in a thread) injects the faults. Per rank: rc, exit
        time (unix, taken inside the namespace right after the process ended) and log text."""
        self.port += 1
        token = secrets.token_hex(32)
        rdv = f"{self.bed.addr(0, 0)}:{self.port}"
        procs, files = [], []
        for r in range(self.a.ranks):
            env = {**os.environ, "NEZHA_RAILS": ",".join(f"{n}={n}:tcp" for n in self.rails),
                   "NEZHA_RANK": str(r), "NEZHA_WORLD_SIZE": str(self.a.ranks), "NEZHA_RENDEZVOUS": rdv,
                   "NEZHA_JOB_TOKEN": token, "NEZHA_IO_TIMEOUT_MS": "10000", **extra_env}
            trace = os.path.join(self.work, f"{tag}.trace.json")
            argv = [self.tun.nezha_bench, "--quiet", "--max-bytes", str(self.a.bytes), "--loop-seconds",
                    str(seconds), "--trace", trace]
            exit_file = os.path.join(self.work, f"{tag}.exit.{r}")
            wrapped = ["sh", "-c", '"$@"; rc=$?; date +%s.%N > "$EXIT_FILE"; exit $rc', "sh", *argv]
            f = open(os.path.join(self.work, f"{tag}.log.{r}"), "w")
            files.append(f)
            procs.append(subprocess.Popen(self.bed.exec_argv(r, wrapped), env={**env, "EXIT_FILE": exit_file},
                                          stdout=f, stderr=subprocess.STDOUT))
        t0 = time.time()
        th = threading.Thread(target=events, args=(t0,))
        th.start()
        for p in procs:
            try:
                p.wait(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        th.join()
        for f in files:
            f.close()
        out = []
        for r, p in enumerate(procs):
            try:
                with open(os.path.join(self.work, f"{tag}.exit.{r}")) as f:
                    ended = float(f.read().strip())
            except (OSError, ValueError):
                ended = None
            with open(os.path.join(self.work, f"{tag}.log.{r}"), errors="replace") as f:
                text = f.read()
            out.append({"rc": p.returncode, "exit_unix": ended, "log": text})
        return out

    def trace(self, tag: str) -> dict:
        with open(os.path.join(self.work, f"{tag}.trace.json")) as f:
            return json.load(f)

    def all_down(self, tag: str, env: dict) -> dict:
        host = self.a.ranks - 1
        marks = {}

        def events(t0):
            time.sleep(max(0.0, t0 + 4.0 - time.time()))
            for k in range(len(self.rails) - 1):
                self.bed.cut(host, k)
            marks["cut_unix"] = time.time()  # just before the last rail goes
            self.bed.cut(host, len(self.rails) - 1)

        ranks = self.launch(tag, 30, env, events)
        for k in range(len(self.rails)):
            self.bed.restore(host, k)
        for k in ranks:
            k["exit_after_s"] = (k["exit_unix"] - marks["cut_unix"]) if k["exit_unix"] else None
        res = judge_all_down(ranks, self.rails)
        res["errors"] = [next((ln for ln in k["log"].splitlines() if "no rail left" in ln), k["log"][-300:])
                         for k in ranks]
        return res

    def restore(self, tag: str, env: dict) -> dict:
        host, rail = self.a.ranks - 1, min(range(len(self.a.rates)), key=lambda k: (self.a.rates[k], -k))
        marks = {}

        def events(t0):
            time.sleep(max(0.0, t0 + 5.0 - time.time()))
            marks["cut_unix"] = time.time()
            self.bed.cut(host, rail)
            time.sleep(max(0.0, t0 + 10.0 - time.time()))
            marks["restore_unix"] = time.time()  # just before the link comes back
            self.bed.restore(host, rail)

        ranks = self.launch(tag, 17, env, events)
        t = self.trace(tag)
        back = share_back_after_restore(t, marks["cut_unix"], marks["restore_unix"], rail)
        old_rule = share_back_after_restore({**t, "readmissions": []}, marks["cut_unix"],
                                            marks["restore_unix"], rail)
        res = {"share_back_s": back, "op_start_rule_s": old_rule, "check": t.get("check"),
               "rcs": [k["rc"] for k in ranks], "ops": t.get("completed"),
               "median_op_s_while_cut": _median_op(t, marks["cut_unix"], marks["restore_unix"]),
               **breakdown_restore(t, marks["restore_unix"], rail)}
        res["exact"] = t.get("check") == "ok" and all(k["rc"] == 0 for k in ranks)
        return res


def _median_op(t, lo, hi):
    d = sorted(op[1] / 1e6 for op in t.get("ops", []) if lo < op[0] <= hi)
    return d[len(d) // 2] if d else None


def fmt(x, unit="s"):
    return "n/a" if x is None else f"{x:.2f} {unit}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rates", default="800,300", help="Mbit/s per rail, every host (default 800,300)")
    ap.add_argument("--bytes", default="64M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", action="store_true", help="also run with heartbeats and waves off")
    ap.add_argument("--out", default=DEFAULT_DIR)
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    a.rates = [int(x) for x in a.rates.split(",")]
    a.bytes = parse_bytes("--bytes", a.bytes)
    if not (2 <= a.ranks <= 8 and 2 <= len(a.rates) <= 3 and a.repeats >= 1):
        ap.error("--ranks 2..8, 2-3 rails, --repeats >= 1")
    tun = load_tunables()
    info = hostinfo.collect()
    started = datetime.datetime.now(datetime.timezone.utc)
    configs = [("after", {})] + ([("before", BASELINE_ENV)] if a.baseline else [])
    results = {name: {"all_down": [], "restore": []} for name, _ in configs}
    work = os.path.join("/tmp", f"nzft-{started:%Y%m%dT%H%M%S}")
    os.makedirs(work, exist_ok=True)
    with Testbed(tun.testbed_sh, BED, a.ranks, len(a.rates), a.rates, mptcp=False) as bed:
        run = Runner(a, tun, bed, work)
        for i in range(a.repeats):
            for name, env in configs:  # interleaved: both see the same machine state
                log(f"repeat {i + 1}/{a.repeats}, {name}: all rails down")
                results[name]["all_down"].append(run.all_down(f"{name}-down-{i}", env))
                log(f"repeat {i + 1}/{a.repeats}, {name}: restore")
                results[name]["restore"].append(run.restore(f"{name}-restore-{i}", env))
    info["loadavg_end"] = list(os.getloadavg())
    lines = [f"Failure timing on the rail test bed, started {started:%Y-%m-%dT%H:%M:%SZ}",
             f"hardware: {info['cpu_model']}, {info['cores']} cores, kernel {info['kernel']}; "
             f"{a.ranks} hosts (network namespaces), rails {'/'.join(map(str, a.rates))} Mbit/s (TBF)",
             f"load average at start {', '.join(f'{x:.2f}' for x in info['loadavg_start'])}, "
             f"at end {', '.join(f'{x:.2f}' for x in info['loadavg_end'])}",
             f"loop of {a.bytes >> 20} MiB allreduces, every result checked; {a.repeats} repeats, worst judged"]
    if a.note:
        lines.append(f"note: {a.note}")
    goals = {}
    for name, _ in configs:
        r = results[name]
        downs = [x["worst_s"] for x in r["all_down"]]
        worst_down = max(downs) if downs and all(x is not None for x in downs) else None
        clear = all(x["clear"] for x in r["all_down"])
        backs = [x["share_back_s"] for x in r["restore"]]
        worst_back = max(backs) if backs and all(x is not None for x in backs) else None
        exact = all(x["exact"] for x in r["restore"])
        label = "runtime as built" if name == "after" else "baseline: " + " ".join(f"{k}={v}" for k, v in BASELINE_ENV.items())
        lines += ["", f"=== {name} ({label}) ==="]
        for i, x in enumerate(r["all_down"]):
            lines.append(f"  all down #{i + 1}: per rank {', '.join(fmt(t) for t in x['per_rank_s'])}; "
                         f"clear: {x['clear']} {'; '.join(x['problems'])}")
        for i, x in enumerate(r["restore"]):
            lines.append(f"  restore  #{i + 1}: share back {fmt(x['share_back_s'])} (op-start rule "
                         f"{fmt(x['op_start_rule_s'])}); re-admitted {fmt(x['readmitted_after_s'])} after the "
                         f"restore, {'between waves' if x['mid_op'] else 'at an op boundary'}; rebuild "
                         f"{fmt(x['rebuild_s'])}; op while cut {fmt(x['median_op_s_while_cut'])}; "
                         f"{x['ops']} ops, check {x['check']}, exit {x['rcs']}")
        g = [("all rails down -> the same clear error on every rank <= 1 s", worst_down, ALL_DOWN_GOAL_S, clear),
             ("restore -> the rail carries its share again <= 1 s", worst_back, SHARE_BACK_GOAL_S, exact)]
        goals[name] = [{"goal": t, "worst_s": v, "status": verdict(v, goal, ok)} for t, v, goal, ok in g]
        lines.append("  goals:")
        for x in goals[name]:
            lines.append(f"    {x['status']:<5} {x['goal']}: worst {fmt(x['worst_s'])}")
        if results[name]["all_down"]:
            lines.append("  errors (last repeat): " + " | ".join(results[name]["all_down"][-1]["errors"]))
    text = "\n".join(lines) + "\n"
    print(text)
    doc = {"schema": "nezha-failover-timing/v1", "started": started.isoformat(), "hardware": info,
           "args": {"ranks": a.ranks, "rates_mbit": a.rates, "bytes": a.bytes, "repeats": a.repeats},
           "results": results, "goals": goals}
    write_result(a.out, "failover-timing", f"{started:%Y%m%dT%H%M}", {".json": doc, ".txt": text})
    return 0 if all(x["status"] == "PASS" for x in goals["after"]) else 1


if __name__ == "__main__":
    sys.exit(main())
