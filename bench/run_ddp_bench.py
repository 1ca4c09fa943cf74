#!/usr/bin/env python3
"""DDP step-time benchmark of the PyTorch 2 backend (runtime/python/README.md): a
communication-bound model (a wide MLP, tiny batch) trained with torch DistributedDataParallel on 2
ranks of the rail test bed, 2 equal TBF rails.

Series, interleaved launch by launch in the same run on the same bed:
  nezha-2rails  c10d backend "nezha" (build/python-torch) striping over r0 and r1
  gloo-1rail    torch's gloo on r0 only (GLOO_SOCKET_IFNAME=r0)
  gloo-mptcp    the same gloo with mptcpize's LD_PRELOAD library (sockets become MPTCP), the bed's
                MPTCP endpoints giving a subflow on every rail (as bench/run_bench.py's gloo-mptcp),
                plus baselines/mptcp/reuseaddr_shim.c: torch's Gloo sets SO_REUSEADDR on accepted
                sockets, which Linux refuses (EINVAL) on an accepted MPTCP socket, and aborts

Target: median step time nezha-2rails <= 0.6x gloo-1rail. Results: bench/results/ddp-<stamp>.
{json,txt} and latest-ddp.{json,txt}. Needs root and the pinned torch venv (make build-torch).
  /usr/bin/python3 -m bench.run_ddp_bench --python VENV/bin/python [--steps N] [--repeats R]
"""

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

from .harness import ddp, hostinfo
from .harness.launch import run_ranks
from .harness.results import write_result
from .harness.testbed import Testbed, diff_tx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "bench", "ddp_worker.py")
PKG = os.path.join(REPO, "build", "python-torch")
TESTBED = os.path.join(REPO, "hack", "testbed.sh")
RESULTS = os.path.join(REPO, "bench", "results")
BED = "nzb4"  # the bench suite's prefix (nzb); run_bench uses nzb1, run_nccl_bench nzb2
WORLD = 2
SHIM_SRC = os.path.join(REPO, "bench", "baselines", "mptcp", "reuseaddr_shim.c")


def mptcp_preload(work: str) -> tuple[str | None, str]:
    """LD_PRELOAD for gloo-mptcp: mptcpize's own wrapper library (read from what `mptcpize run`
    sets; it overwrites LD_PRELOAD, so it cannot be chained) and the shim built here.
    (value, "") or (None, why not)."""
    try:
        p = subprocess.run(["mptcpize", "run", "/usr/bin/env"], capture_output=True, text=True, timeout=10)
        wrap = next((ln.split("=", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("LD_PRELOAD=")), None)
        if not wrap:
            return None, "mptcpize run sets no LD_PRELOAD"
        shim = os.path.join(work, "reuseaddr_shim.so")
        c = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", shim, SHIM_SRC, "-ldl"],
                           capture_output=True, text=True, timeout=60)
        if c.returncode != 0:
            return None, f"shim build failed: {c.stderr.strip()[:200]}"
        return f"{wrap}:{shim}", ""
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"mptcpize/cc unavailable: {e}"


def log(msg: str) -> None:
    print(f"ddp-bench: {msg}", file=sys.stderr, flush=True)


def run_launch(bed: Testbed, series: str, a, port: int, work: str, tag: str, preload: str) -> dict:
    master = bed.addr(0, 0)
    token = secrets.token_hex(32)

    def argv(rank: int) -> list[str]:
        cmd = [a.python, WORKER, "nezha" if series == ddp.SUBJECT else "gloo", str(a.steps),
               str(a.warmup), str(a.width), str(a.layers), str(a.batch)]
        # Set inside the namespace (as `mptcpize run` would be), not on testbed.sh's own tools.
        return ["env", f"LD_PRELOAD={preload}", *cmd] if series == ddp.MPTCP else cmd

    def env(rank: int) -> dict:
        e = {"RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
             "MASTER_ADDR": master, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
             "PYTHONPATH": PKG}
        if series == ddp.SUBJECT:
            e.update({"NEZHA_RAILS": "r0=r0:tcp,r1=r1:tcp", "NEZHA_JOB_TOKEN": token,
                      "NEZHA_RENDEZVOUS_TIMEOUT_MS": "60000", "NEZHA_IO_TIMEOUT_MS": "30000"})
        else:
            e["GLOO_SOCKET_IFNAME"] = "r0"
        return e

    tx0, mp0 = bed.rail_tx_bytes(), bed.mptcp_counters()
    res = run_ranks(bed, WORLD, argv, env, timeout_s=a.timeout, log_dir=work, tag=tag)
    out = {"series": series, "seconds": round(res.seconds, 1), "rail_tx_bytes": diff_tx(tx0, bed.rail_tx_bytes())}
    if series == ddp.MPTCP:
        mp1 = bed.mptcp_counters()
        out["mptcp_counters"] = {k: mp1[k] - mp0[k] for k in mp1}
    if not res.ok():
        out.update(ok=False, error=res.failure())
        return out
    reports = []
    for p in res.logs:
        with open(p, errors="replace") as f:
            reports.append(ddp.parse_report(f.read()))
    if any(r is None for r in reports):
        out.update(ok=False, error="a rank printed no REPORT line")
        return out
    out.update(ok=True, median_s=ddp.launch_median([r["step_s"] for r in reports]),
               step_s=[r["step_s"] for r in reports], last_loss=reports[0]["last_loss"],
               grad_bytes=reports[0]["grad_bytes"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="the torch venv's python (hack/versions.sh NEZHA_TORCH_VENV)")
    ap.add_argument("--rate", type=int, default=400, help="each rail's TBF rate, Mbit/s (default 400)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per launch (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--width", type=int, default=1024, help="MLP width (default 1024)")
    ap.add_argument("--layers", type=int, default=4, help="Linear layers (default 4: 16.8 MB of gradients)")
    ap.add_argument("--batch", type=int, default=8, help="batch per rank (default 8)")
    ap.add_argument("--repeats", type=int, default=2, help="launches per series, interleaved (default 2)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per launch before it is killed")
    ap.add_argument("--note", default="", help="free text stored with the result")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--tcp-cc", default="", metavar="ALGO",
                    help="TCP congestion control of the bed's hosts (default: the machine's, recorded)")
    ap.add_argument("--kind", default="ddp", help="results kind: <kind>-<stamp>.* and latest-<kind>.* (default ddp)")
    ap.add_argument("--out", default=RESULTS, help="results directory (default bench/results)")
    a = ap.parse_args()
    if hostinfo.tcp_cc_error(a.tcp_cc):
        ap.error(hostinfo.tcp_cc_error(a.tcp_cc))
    if os.geteuid() != 0:
        log("needs root (network namespaces)")
        return 1
    for p, hint in ((a.python, "make build-torch"), (os.path.join(PKG, "nezha"), "make build-torch")):
        if not os.path.exists(p):
            log(f"missing {p} (run: {hint})")
            return 1
    host = hostinfo.collect(a.tcp_cc)
    work = tempfile.mkdtemp(prefix="ddp-bench-")
    launches = {s: [] for s in ddp.SERIES}
    bed = Testbed(TESTBED, BED, hosts=WORLD, rails=2, rates_mbit=[a.rate, a.rate], mptcp=True, tcp_cc=a.tcp_cc)
    port = 29600
    t_start = time.monotonic()
    log(f"2 ranks, rails {a.rate}/{a.rate} Mbit/s, MLP {a.layers}x{a.width}, batch {a.batch}, "
        f"{a.warmup}+{a.steps} steps x {a.repeats} launches per series")
    preload, why = mptcp_preload(work)
    if preload is None:
        log(f"gloo-mptcp MISSING: {why}")
    try:
        bed.up()
        for rep in range(a.repeats):
            order = list(ddp.SERIES[rep % 3:] + ddp.SERIES[:rep % 3])  # first series rotates
            for s in order:
                if s == ddp.MPTCP and preload is None:
                    continue
                port += 2  # torch's store, and the port next to it for nezha's rendezvous
                r = run_launch(bed, s, a, port, work, f"{s}-{rep}", preload or "")
                launches[s].append(r)
                log(f"  {s:13s} " + (f"median step {r['median_s'] * 1e3:.1f} ms, rails tx {r['rail_tx_bytes']}"
                                     if r["ok"] else f"FAILED: {r['error']}"))
    finally:
        bed.down()
    host["loadavg_end"] = list(os.getloadavg())
    medians = {s: ddp.series_median([r["median_s"] for r in launches[s] if r["ok"]]) for s in ddp.SERIES}
    ratio, verdict = ddp.judge(medians[ddp.SUBJECT], medians[ddp.BASELINE])
    ratio_mptcp, _ = ddp.judge(medians[ddp.SUBJECT], medians[ddp.MPTCP])
    grad = next((r["grad_bytes"] for s in ddp.SERIES for r in launches[s] if r["ok"]), None)
    losses = {s: [r["last_loss"] for r in launches[s] if r["ok"]] for s in ddp.SERIES}
    doc = {"kind": "ddp-step-time", "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "minutes": round((time.monotonic() - t_start) / 60, 1), "host": host, "note": a.note,
           "config": {"ranks": WORLD, "rails_mbit": [a.rate, a.rate], "width": a.width, "layers": a.layers,
                      "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "repeats": a.repeats,
                      "grad_bytes": grad},
           "mptcp_preload": preload, "mptcp_missing_why": why or None,
           "series": launches, "median_step_s": medians, "last_loss": losses,
           "ratio_nezha_over_gloo_1rail": ratio, "ratio_nezha_over_gloo_mptcp": ratio_mptcp,
           "goal": {"target": f"nezha-2rails <= {ddp.TARGET_RATIO}x gloo-1rail step time",
                    "value": ratio, "verdict": verdict}}
    notes = {}
    for s in ddp.SERIES:
        bad = [r["error"] for r in launches[s] if not r["ok"]]
        tx = [r["rail_tx_bytes"] for r in launches[s]]
        parts = [f"rail tx MB {[[round(b / 1e6) for b in t] for t in tx]}"]
        if s == ddp.MPTCP:
            parts.append(f"MPTCP joins {[r.get('mptcp_counters', {}).get('MPTcpExtMPJoinAckRx') for r in launches[s]]}")
        if bad:
            parts.append(f"failed: {bad[0][:120]}")
        if s == ddp.MPTCP and preload is None:
            parts.append(f"not run: {why}")
        notes[s] = "; ".join(parts)
    lines = [f"DDP step-time benchmark {doc['time_utc']} ({doc['minutes']} min) - {WORLD} ranks, "
             f"2 rails x {a.rate} Mbit/s (TBF, hack/testbed.sh)",
             f"model: MLP {a.layers} x Linear({a.width},{a.width}), batch {a.batch}, "
             f"{(grad or 0) / 1e6:.1f} MB of gradients per step; {a.warmup} warmup + {a.steps} timed "
             f"steps per launch, {a.repeats} launches per series (interleaved); slowest rank's median step",
             f"machine: {host['cpu_model']}, {host['cores']} cores, kernel {host['kernel']}, bed's TCP congestion "
             f"control {host['tcp_congestion_control']}; load average "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_start'])} at start, "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_end'])} at end"]
    if a.note:
        lines.append(f"note: {a.note}")
    lines += ["", "median step time:"]
    for s in ddp.SERIES:
        lines.append(ddp.format_row(s, medians[s], [r["median_s"] for r in launches[s] if r["ok"]], notes[s]))
    lines.append("")
    for s in ddp.SERIES:
        if losses[s]:
            lines.append(f"  last loss {s:13s} {', '.join(f'{x:.6f}' for x in losses[s])}")
    lines.append("")
    if ratio_mptcp is not None:
        lines.append(f"nezha-2rails / gloo-mptcp step time: {ratio_mptcp:.3f}")
    value = "n/a" if ratio is None else f"{ratio:.3f}"
    lines.append(f"{verdict}  nezha-2rails / gloo-1rail step time {value} (target <= {ddp.TARGET_RATIO})")
    text = "\n".join(lines) + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    write_result(a.out, a.kind, stamp, {".json": doc, ".txt": text})
    sys.stdout.write(text)
    if a.keep_logs:
        log(f"logs in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["ok"] for s in (ddp.SUBJECT, ddp.BASELINE) for r in launches[s]) else 1


if __name__ == "__main__":
    sys.exit(main())
