#!/usr/bin/env python3
"""TaLB benchmark (tensor-aware scheduling by priority, runtime/python/README.md): how soon the gradient bucket
the next forward pass needs first is reduced, with and without priorities.

DDP with one bucket per layer on a communication-bound MLP (8 x Linear(1024, 1024) without
bias, batch 8: 8 buckets of 4.2 MB) and the c10d backend "nezha" on 2 ranks of the rail test
bed, 2 TBF rails of 400 Mbit/s (800 Mbit/s per host in sum). In every launch the steps alternate (the same on
every rank, bench/talb_worker.py): even steps pass each bucket's allreduce priority
bucket.index() (what nezha.torch.priority_hook does), odd steps issue the same allreduces
without priority (issue order). Per step: seconds from the start of backward until the bucket
holding the first layer is reduced, until the last bucket is, and the step time.

Target (chosen here; the issue asks for the measurement): time to the first-needed bucket with
priorities <= 0.5x without (harness/talb.py says why). Results: bench/results/talb-<stamp>.
{json,txt} and latest-talb.{json,txt}. Needs root and the pinned torch venv (make build-torch).
  /usr/bin/python3 -m bench.run_talb_bench --python VENV/bin/python [--steps N] [--repeats R]
"""

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time

from .harness import ddp, hostinfo, talb
from .harness.launch import add_torch_bench_args, run_ranks, torch_bench_missing, torch_rank_env
from .harness.results import write_result
from .harness.testbed import Testbed, diff_tx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "bench", "talb_worker.py")
PKG = os.path.join(REPO, "build", "python-torch")
TESTBED = os.path.join(REPO, "hack", "testbed.sh")
RESULTS = os.path.join(REPO, "bench", "results")
BED = "nzb5"  # the bench suite's prefix (nzb); nzb1 run_bench, nzb2 nccl, nzb4 ddp
WORLD = 2
KEYS = ("first_needed_s", "last_bucket_s", "step_s")


def log(msg: str) -> None:
    print(f"talb-bench: {msg}", file=sys.stderr, flush=True)


def run_launch(bed: Testbed, a, port: int, work: str, tag: str) -> dict:
    token = secrets.token_hex(32)

    def argv(rank: int) -> list[str]:
        return [a.python, WORKER, str(a.steps), str(a.warmup), str(a.width), str(a.layers), str(a.batch)]

    def env(rank: int) -> dict:
        return torch_rank_env(bed, rank, WORLD, port, PKG, token)

    tx0 = bed.rail_tx_bytes()
    res = run_ranks(bed, WORLD, argv, env, timeout_s=a.timeout, log_dir=work, tag=tag)
    out = {"seconds": round(res.seconds, 1), "rail_tx_bytes": diff_tx(tx0, bed.rail_tx_bytes())}
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
    out.update(ok=True, buckets=reports[0]["buckets"], first_bucket=reports[0]["first_bucket"],
               last_loss=reports[0]["last_loss"], grad_bytes=reports[0]["grad_bytes"],
               rows=[r["rows"] for r in reports])
    for m in talb.MODES:
        for k in KEYS:
            out[f"{m}_{k}"] = talb.launch_value([r["rows"][m] for r in reports], k)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_torch_bench_args(ap, 400)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per launch, half of each mode (default 20)")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps first (default 4)")
    ap.add_argument("--width", type=int, default=1024, help="MLP width (default 1024)")
    ap.add_argument("--layers", type=int, default=8, help="Linear layers = buckets (default 8)")
    ap.add_argument("--batch", type=int, default=8, help="batch per rank (default 8)")
    ap.add_argument("--repeats", type=int, default=2, help="launches (default 2)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per launch before it is killed")
    ap.add_argument("--note", default="", help="free text stored with the result")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    missing = torch_bench_missing(a.python, PKG)
    if missing:
        log(missing)
        return 1
    host = hostinfo.collect()
    work = tempfile.mkdtemp(prefix="talb-bench-")
    launches = []
    bed = Testbed(TESTBED, BED, hosts=WORLD, rails=2, rates_mbit=[a.rate, a.rate], mptcp=False)
    port = 29700
    t_start = time.monotonic()
    log(f"2 ranks, rails {a.rate}/{a.rate} Mbit/s, MLP {a.layers}x{a.width}, batch {a.batch}, "
        f"{a.warmup}+{a.steps} steps x {a.repeats} launches (prio/fifo alternating by step)")
    try:
        bed.up()
        for rep in range(a.repeats):
            port += 2  # torch's store, and the port next to it for nezha's rendezvous
            r = run_launch(bed, a, port, work, f"talb-{rep}")
            launches.append(r)
            log(f"  launch {rep}: " + (f"first-needed bucket prio {r['prio_first_needed_s'] * 1e3:.1f} ms, "
                                      f"fifo {r['fifo_first_needed_s'] * 1e3:.1f} ms, {r['buckets']} buckets"
                                      if r["ok"] else f"FAILED: {r['error']}"))
    finally:
        bed.down()
    host["loadavg_end"] = list(os.getloadavg())
    ok = [r for r in launches if r["ok"]]
    med = {f"{m}_{k}": talb.series_median([r[f"{m}_{k}"] for r in ok]) for m in talb.MODES for k in KEYS}
    ratio, verdict = talb.judge(med["prio_first_needed_s"], med["fifo_first_needed_s"])
    step_ratio, _ = talb.judge(med["prio_step_s"], med["fifo_step_s"])
    grad = ok[0]["grad_bytes"] if ok else None
    buckets = ok[0]["buckets"] if ok else None
    doc = {"kind": "talb-first-needed-bucket",
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "minutes": round((time.monotonic() - t_start) / 60, 1), "host": host, "note": a.note,
           "config": {"ranks": WORLD, "rails_mbit": [a.rate, a.rate], "width": a.width, "layers": a.layers,
                      "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "repeats": a.repeats,
                      "grad_bytes": grad, "buckets": buckets},
           "launches": launches, "median": med, "ratio_step_prio_over_fifo": step_ratio,
           "goal": {"target": f"first-needed bucket reduced: prio <= {talb.TARGET_RATIO}x fifo",
                    "value": ratio, "verdict": verdict}}

    def ms(x):
        return "n/a" if x is None else f"{x * 1e3:.1f} ms"

    lines = [f"TaLB benchmark {doc['time_utc']} ({doc['minutes']} min) - {WORLD} ranks, "
             f"2 rails x {a.rate} Mbit/s (TBF, hack/testbed.sh), backend nezha",
             f"model: MLP {a.layers} x Linear({a.width},{a.width}), batch {a.batch}, DDP one bucket per layer "
             f"({buckets} buckets, {(grad or 0) / 1e6:.1f} MB of gradients per step); {a.warmup} warmup + "
             f"{a.steps} timed steps per launch alternating prio/fifo, {a.repeats} launches; "
             "slowest rank's median per launch, median over launches",
             f"machine: {host['cpu_model']}, {host['cores']} cores, kernel {host['kernel']}; load average "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_start'])} at start, "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_end'])} at end"]
    if a.note:
        lines.append(f"note: {a.note}")
    lines += ["", f"  {'':6s} {'first-needed bucket':>20s} {'last bucket':>12s} {'step':>10s}   (from start of backward)"]
    for m, label in (("prio", "prio"), ("fifo", "fifo")):
        lines.append(f"  {label:6s} {ms(med[f'{m}_first_needed_s']):>20s} {ms(med[f'{m}_last_bucket_s']):>12s} "
                     f"{ms(med[f'{m}_step_s']):>10s}")
    for i, r in enumerate(launches):
        lines.append(f"  launch {i}: " + (f"first-needed prio {ms(r['prio_first_needed_s'])} / fifo "
                                         f"{ms(r['fifo_first_needed_s'])}; rail tx MB "
                                         f"{[round(b / 1e6) for b in r['rail_tx_bytes']]}"
                                         if r["ok"] else f"FAILED: {r['error'][:160]}"))
    lines.append("")
    if step_ratio is not None:
        lines.append(f"step time prio / fifo: {step_ratio:.3f} (informational: DDP waits for every bucket)")
    value = "n/a" if ratio is None else f"{ratio:.3f}"
    lines.append(f"{verdict}  first-needed bucket prio / fifo {value} (target <= {talb.TARGET_RATIO})")
    text = "\n".join(lines) + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    write_result(RESULTS, "talb", stamp, {".json": doc, ".txt": text})
    sys.stdout.write(text)
    if a.keep_logs:
        log(f"logs in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if launches and all(r["ok"] for r in launches) else 1


if __name__ == "__main__":
    sys.exit(main())
