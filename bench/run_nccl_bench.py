#!/usr/bin/env python3
"""NCCL net plugin benchmark (issue: GPU path): ring allreduce through libnccl-net-nezha.so,
driven by nezha-nccl-harness exactly as NCCL's proxy drives a plugin, on TBF-shaped rails.

Scenarios: ring allreduce on 500/500 and 800/300 Mbit/s rails (2 ranks, and 3 on 500/500), and
a one-way p2p stream (rank 0 -> rank 1, NCCL send/recv) on 500/500. Series, all in the same run
on the same bed:
  plugin-2rails   the plugin with both rails (Nezha stripes every connection)
  plugin-1rail    the plugin with rail r0 only
  plain-socket    one plain TCP socket per neighbour on r0 (what NCCL's socket transport uses)
  ceiling         sum of the TBF rates (a ring's bus bandwidth cannot exceed its links)

Faults (on the 500/500 bed, unless --no-faults): a 14 s loop of 8 MiB ring allreduces through the
plugin on both rails while host 1's r1 is cut, black-holed (iptables, carrier up) or gray (1/40 of
its rate) for 5 s, judged from rank 0's per-operation trace (harness/nccl_faults.py): the stall of
the operation in flight <= 1 s, and the pace while the rail is out >= 0.9 x the plugin on the
surviving rail alone (a fault-free loop on r0 in the same run). Every result is checked.

Target: plugin-2rails >= 1.9x plugin-1rail on two equal rails. Results go to
bench/results/nccl-<stamp>.{json,txt} and, for a complete run, latest-nccl.{json,txt}. Needs root;
~3 min. The fault goals scatter between runs: --fault KIND --fault-repeat N runs only the 500/500
bed and those faults N times each (stamped files only).
  /usr/bin/python3 -m bench.run_nccl_bench [--quick] [--keep-logs] [--scenario S] [--fault KIND --fault-repeat N]
"""

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from typing import Optional

from .harness import hostinfo
from .harness.chaos_run import apply_fault
from .harness.nccl_faults import PACE_GOAL, STALL_GOAL_S, judge_fault, steady_gbps, trace_of
from .harness.launch import run_ranks
from .harness.results import write_result
from .harness.testbed import Testbed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build", "runtime")
PLUGIN = os.path.join(BUILD, "libnccl-net-nezha.so")
HARNESS = os.path.join(BUILD, "nezha-nccl-harness")
TESTBED = os.path.join(REPO, "hack", "testbed.sh")
RESULTS = os.path.join(REPO, "bench", "results")
TARGET_TWO_EQUAL = 1.9
# NCCL's proxy thread spins (sched_yield) between polls. Here 2-3 spinning ranks share 2 cores with
# the kernel's TCP and TBF work, which then measures CPU contention, not the rails; a short sleep
# after a pass without progress leaves the cores to the kernel, as a many-core GPU host would.
IDLE_SLEEP_US = 20

# (name, ranks, rail rates Mbit/s, harness mode). Per host the rails sum to <= 1.1 Gbit/s.
# "ring": ring allreduce (both directions busy); "stream": rank 0 -> rank 1 only (NCCL p2p).
SCENARIOS = [
    ("equal-2x500", 2, [500, 500], "ring"),
    ("unequal-800+300", 2, [800, 300], "ring"),
    ("equal-2x500-3ranks", 3, [500, 500], "ring"),
    ("equal-2x500-p2p", 2, [500, 500], "stream"),
]


def log(msg: str) -> None:
    print(f"nccl-bench: {msg}", file=sys.stderr, flush=True)


def last_json(path: str) -> dict:
    with open(path, errors="replace") as f:
        lines = [ln for ln in f if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON result in {path}")
    return json.loads(lines[-1])


def run_series(bed: Testbed, world: int, series: str, nbytes: int, iters: int, work: str,
               mode: str = "ring") -> dict:
    d = tempfile.mkdtemp(dir=work, prefix=series + "-")

    def argv(rank: int) -> list[str]:
        base = [HARNESS, "--rank", str(rank), "--world", str(world), "--dir", d, "--mode", mode,
                "--bytes", str(nbytes), "--iters", str(iters), "--timeout-ms", "120000"]
        if series == "plain-socket":
            return base + ["--transport", "plain", "--iface", "r0"]
        return base + ["--plugin", PLUGIN, "--idle-sleep-us", str(IDLE_SLEEP_US)]

    token = secrets.token_hex(32)  # every rail connection of the plugin proves it

    def env(rank: int) -> dict:
        rails = "r0=r0:tcp,r1=r1:tcp" if series == "plugin-2rails" else "r0=r0:tcp"
        return {"NEZHA_RAILS": rails, "NEZHA_JOB_TOKEN": token}

    res = run_ranks(bed, world, argv, env, timeout_s=240, log_dir=work, tag=f"{series}-{mode}-{world}")
    if not res.ok():
        return {"series": series, "ok": False, "error": res.failure()}
    docs = [last_json(p) for p in res.logs]
    if any(doc.get("check") != "ok" for doc in docs):
        return {"series": series, "ok": False, "error": "a result was wrong"}
    busbw = min(doc["busbw_bytes_per_s"] for doc in docs)  # the ring moves at its slowest rank
    out = {"series": series, "ok": True, "busbw_gbps": busbw * 8 / 1e9,
           "median_op_s": statistics.median(doc["median_op_s"] for doc in docs), "ops": docs[0]["ops"]}
    if "stats" in docs[0]:
        out["rank0_bytes_sent_per_rail"] = [r["bytes_sent"] for r in docs[0]["stats"]["rails"]]
    return out


FAULT_BYTES = 8 << 20
FAULT_LOOP_S = 14
FAULT_AFTER_S = 3.0  # after the loop has written DIR/running (it is moving data)
FAULT_FOR_S = 5.0
FAULT_HOST, FAULT_RAIL = 1, 1


def run_fault_loop(bed: Testbed, series: str, work: str, fault: Optional[str]) -> dict:
    """One --seconds ring loop of 2 ranks through the plugin; with `fault`, host 1's r1 suffers it
    for FAULT_FOR_S in the middle. Returns rank 0's trace and the fault's unix times."""
    d = tempfile.mkdtemp(dir=work, prefix=f"{series}-{fault or 'none'}-")
    token = secrets.token_hex(32)
    rails = "r0=r0:tcp,r1=r1:tcp" if series == "plugin-2rails" else "r0=r0:tcp"

    def argv(rank: int) -> list[str]:
        return [HARNESS, "--rank", str(rank), "--world", "2", "--dir", d, "--mode", "ring",
                "--bytes", str(FAULT_BYTES), "--iters", "1", "--seconds", str(FAULT_LOOP_S),
                "--timeout-ms", "120000", "--plugin", PLUGIN, "--idle-sleep-us", str(IDLE_SLEEP_US)]

    times: dict = {}

    def inject() -> None:
        running, deadline = os.path.join(d, "running"), time.monotonic() + 60
        while not os.path.exists(running):  # the harness's only sign that it moves data
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(FAULT_AFTER_S)
        try:
            apply_fault(bed, fault, FAULT_HOST, FAULT_RAIL, True)
            times["on"] = time.time()
            time.sleep(FAULT_FOR_S)
        finally:
            times["off"] = time.time()
            apply_fault(bed, fault, FAULT_HOST, FAULT_RAIL, False)

    injector = threading.Thread(target=inject, daemon=True) if fault else None
    res = run_ranks(bed, 2, argv, lambda rank: {"NEZHA_RAILS": rails, "NEZHA_JOB_TOKEN": token},
                    timeout_s=FAULT_LOOP_S + 120, log_dir=work, tag=os.path.basename(d),
                    on_started=(lambda _t0: injector.start()) if injector else None)
    if injector:
        injector.join()
    if not res.ok():
        return {"ok": False, "error": res.failure()}
    docs = [last_json(p) for p in res.logs]
    if any(doc.get("check") != "ok" for doc in docs):
        return {"ok": False, "error": "a result was wrong"}
    if fault and "on" not in times:
        return {"ok": False, "error": "the fault was never applied (the loop did not start moving data)"}
    return {"ok": True, "trace": trace_of(docs[0], f"{series} rank 0"), **times}


def run_faults(bed: Testbed, work: str, kinds: tuple = ("cut", "blackhole", "gray"), repeat: int = 1) -> dict:
    """Each fault kind `repeat` times in turn, against one fault-free baseline on r0."""
    base = run_fault_loop(bed, "plugin-1rail", work, None)
    one_rail = steady_gbps(base["trace"]) if base["ok"] else None
    runs = []
    for _ in range(repeat):
        for kind in kinds:
            log(f"  fault: {kind} of host {FAULT_HOST}'s r{FAULT_RAIL} for {FAULT_FOR_S:.0f} s")
            r = run_fault_loop(bed, "plugin-2rails", work, kind)
            if r["ok"]:
                runs.append(judge_fault(kind, r["trace"], r["on"], r["off"], one_rail))
            else:
                runs.append({"fault": kind, "error": r["error"], "stall_verdict": "MISS", "pace_verdict": "MISS"})
    return {"one_rail_gbps": one_rail, "baseline_error": None if base["ok"] else base["error"], "runs": runs}


def fault_lines(faults: dict) -> list[str]:
    one = faults["one_rail_gbps"]
    lines = [f"faults: 2 ranks, 500/500 Mbit/s, {FAULT_BYTES >> 20} MiB ring allreduce loop, host {FAULT_HOST}'s "
             f"r{FAULT_RAIL} faulty for {FAULT_FOR_S:.0f} s; plugin on r0 alone "
             + (f"{one:.3f} GB/s algbw" if one else f"FAILED {faults['baseline_error']}")]
    for r in faults["runs"]:
        if "error" in r:
            lines.append(f"  {r['fault']:10s} FAILED {r['error']}")
            continue
        pace = "n/a" if r["pace_vs_one_rail"] is None else f"{r['pace_vs_one_rail']:.3f}"
        if r.get("pace_whole_ops_vs_one_rail") is not None:
            pace += f" (whole ops only {r['pace_whole_ops_vs_one_rail']:.3f})"
        stall = "never resumed" if r["stall_s"] is None else f"{r['stall_s']:.3f} s"
        lines.append(f"  {r['fault']:10s} {r['ops']} exact ops; stall of the op in flight {stall}; "
                     f"pace while out / plugin on r0 alone {pace}")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, smaller operations")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--scenario", action="append", choices=[s[0] for s in SCENARIOS],
                    help="run only this scenario (repeatable)")
    ap.add_argument("--no-faults", action="store_true", help="skip the fault runs on the 500/500 bed")
    ap.add_argument("--fault", action="append", choices=["cut", "blackhole", "gray"],
                    help="run only this fault kind (repeatable)")
    ap.add_argument("--fault-repeat", type=int, default=1, metavar="N",
                    help="run each fault N times in turn (the fault goals scatter between runs; default 1)")
    ap.add_argument("--tcp-cc", default="", metavar="ALGO",
                    help="TCP congestion control of every bed host (hack/testbed.sh --tcp-cc; default: the "
                         "machine's, recorded with the results)")
    a = ap.parse_args()
    if hostinfo.tcp_cc_error(a.tcp_cc):
        ap.error(hostinfo.tcp_cc_error(a.tcp_cc))
    if a.fault_repeat < 1:
        ap.error(f"--fault-repeat: must be at least 1, not {a.fault_repeat}")
    # A partial or repeated run is an experiment: stamped files only, latest-nccl.* untouched.
    complete = not a.quick and not a.scenario and not a.fault and a.fault_repeat == 1
    if os.geteuid() != 0:
        log("needs root (network namespaces)")
        return 1
    for p in (PLUGIN, HARNESS):
        if not os.path.exists(p):
            log(f"missing {p} (run: make build-runtime)")
            return 1
    nbytes = (8 if a.quick else 64) << 20
    iters = 3 if a.quick else 8
    host = hostinfo.collect(a.tcp_cc)
    work = tempfile.mkdtemp(prefix="nccl-bench-")
    scenarios = []
    faults = None
    for name, world, rates, mode in SCENARIOS:
        if a.scenario and name not in a.scenario:
            continue
        bed = Testbed(TESTBED, "nzb2", hosts=world, rails=len(rates), rates_mbit=rates, mptcp=False,
                      tcp_cc=a.tcp_cc)
        what = "allreduce" if mode == "ring" else "one-way stream"
        log(f"{name}: {world} ranks, rails {rates} Mbit/s, {nbytes >> 20} MiB {what} x {iters}")
        try:
            bed.up()
            rows = [run_series(bed, world, s, nbytes, iters, work, mode)
                    for s in ("plugin-2rails", "plugin-1rail", "plain-socket")]
            if name == "equal-2x500" and not a.no_faults:
                faults = run_faults(bed, work, tuple(a.fault or ("cut", "blackhole", "gray")), a.fault_repeat)
        finally:
            bed.down()
        ceiling = sum(rates) / 1000.0
        by = {r["series"]: r for r in rows}
        ratios = {}
        if by["plugin-2rails"]["ok"] and by["plugin-1rail"]["ok"]:
            ratios["plugin-2rails / plugin-1rail"] = by["plugin-2rails"]["busbw_gbps"] / by["plugin-1rail"]["busbw_gbps"]
        if by["plugin-2rails"]["ok"] and by["plain-socket"]["ok"]:
            ratios["plugin-2rails / plain-socket"] = by["plugin-2rails"]["busbw_gbps"] / by["plain-socket"]["busbw_gbps"]
        if by["plugin-1rail"]["ok"] and by["plain-socket"]["ok"]:
            ratios["plugin-1rail / plain-socket"] = by["plugin-1rail"]["busbw_gbps"] / by["plain-socket"]["busbw_gbps"]
        if by["plugin-2rails"]["ok"]:
            ratios["plugin-2rails / ceiling"] = by["plugin-2rails"]["busbw_gbps"] / ceiling
        for r in rows:
            log(f"  {r['series']:14s} " + (f"busbw {r['busbw_gbps']:.3f} Gbit/s" if r["ok"] else f"FAILED: {r['error']}"))
        scenarios.append({"name": name, "world": world, "mode": mode, "rates_mbit": rates, "ceiling_gbps": ceiling,
                          "series": rows, "ratios": ratios})
    goals = []
    for sc in scenarios:
        if sc["name"].startswith("equal"):
            v = sc["ratios"].get("plugin-2rails / plugin-1rail")
            goals.append({"goal": f"{sc['name']}: two equal rails >= {TARGET_TWO_EQUAL}x one rail",
                          "value": v, "verdict": "PASS" if v is not None and v >= TARGET_TWO_EQUAL else "MISS"})
    for r in (faults or {}).get("runs", []):
        goals.append({"goal": f"fault {r['fault']}: stall of the op in flight <= {STALL_GOAL_S} s",
                      "value": r.get("stall_s"), "verdict": r["stall_verdict"]})
        goals.append({"goal": f"fault {r['fault']}: pace while out >= {PACE_GOAL} x the plugin on the surviving rail",
                      "value": r.get("pace_vs_one_rail"), "verdict": r["pace_verdict"]})
    host["loadavg_end"] = list(os.getloadavg())
    doc = {"kind": "nccl-plugin", "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": host, "bytes": nbytes, "iters": iters, "scenarios": scenarios, "faults": faults,
           "goals": goals}
    lines = [f"NCCL net plugin benchmark {doc['time_utc']} - {nbytes >> 20} MiB per operation "
             f"(ring allreduce, or a one-way stream for p2p), median of {iters} ops, slowest rank",
             f"machine: {host['cpu_model']}, {host['cores']} cores, kernel {host['kernel']} (TCP congestion "
             f"control {host['tcp_congestion_control']}); load "
             f"{host['loadavg_start'][0]:.2f} -> {host['loadavg_end'][0]:.2f}",
             "rails: TBF-shaped veth pairs through a bridge namespace (hack/testbed.sh)", ""]
    for sc in scenarios:
        what = "ring allreduce busbw" if sc["mode"] == "ring" else "one-way p2p bandwidth"
        lines.append(f"{sc['name']}: {sc['world']} ranks, rails {sc['rates_mbit']} Mbit/s, {what}, "
                     f"ceiling {sc['ceiling_gbps']:.3f} Gbit/s")
        for r in sc["series"]:
            lines.append(f"  {r['series']:14s} " + (f"{r['busbw_gbps']:.3f} Gbit/s busbw" +
                         (f"  rank 0 bytes per rail {r['rank0_bytes_sent_per_rail']}" if "rank0_bytes_sent_per_rail" in r else "")
                         if r["ok"] else f"FAILED {r['error']}"))
        for k, v in sc["ratios"].items():
            lines.append(f"  {k:32s} {v:.3f}")
        lines.append("")
    if faults:
        lines += fault_lines(faults)
    for g in goals:
        value = "n/a" if g["value"] is None else f"{g['value']:.3f}"
        lines.append(f"{g['verdict']}  {g['goal']} (measured {value})")
    text = "\n".join(lines) + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    write_result(RESULTS, "nccl", stamp, {".json": doc, ".txt": text}, latest=complete)
    sys.stdout.write(text)
    if not a.keep_logs:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"logs in {work}")
    faults_ok = faults is None or (faults["baseline_error"] is None and not any("error" in r for r in faults["runs"]))
    return 0 if faults_ok and all(r["ok"] for sc in scenarios for r in sc["series"]) else 1


if __name__ == "__main__":
    sys.exit(main())
