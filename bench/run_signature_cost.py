#!/usr/bin/env python3
"""Signature-cost benchmark: what the torch backend's cross-rank check of every collective's
signature (runtime/python/csrc/op_signature.h, runtime/python/README.md "Mismatched
collectives") costs an allreduce, judged side by side in one launch.

2 ranks of the rail test bed, 2 TBF rails (default 500/500 Mbit/s); in every launch each rank
has two nezha groups on the same rails, one checking signatures and one not, and alternates
blocks of 5 allreduces between them (bench/signature_worker.py; the suite's --paired-policy
comparison), in two launches: the checked group created first, then second (a process's first
communicator is slower at 4-32 KiB whatever it does; the geometric mean of both ratios cancels it). Per size: each side's trimmed mean (fastest 98 %, slowest rank), checked over
unchecked. Targets: <= 1.01 at >= 1 MiB, <= 1.05 at <= 64 KiB (harness/signature_cost.py).
Results: bench/results/signature-<stamp>.{json,txt} and latest-signature.{json,txt}. Needs root
and the pinned torch venv (make build-torch).
  /usr/bin/python3 -m bench.run_signature_cost --python VENV/bin/python [--small-iters N]
"""

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time

from .harness import ddp, hostinfo, signature_cost
from .harness.launch import add_torch_bench_args, run_ranks, torch_bench_missing, torch_rank_env
from .harness.results import write_result
from .harness.testbed import Testbed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "bench", "signature_worker.py")
PKG = os.path.join(REPO, "build", "python-torch")
TESTBED = os.path.join(REPO, "hack", "testbed.sh")
RESULTS = os.path.join(REPO, "bench", "results")
BED = "nzb6"  # the bench suite's prefix (nzb); nzb1 run_bench, nzb2 nccl, nzb4 ddp, nzb5 talb
WORLD = 2
PORT = 29750  # torch's store; nezha's rendezvous takes the next one
SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 20, 4 << 20]


def log(msg: str) -> None:
    print(f"signature-cost: {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_torch_bench_args(ap, 500)
    ap.add_argument("--small-iters", type=int, default=300, help="ops per side below 1 MiB (default 300)")
    ap.add_argument("--large-iters", type=int, default=20, help="ops per side from 1 MiB (default 20)")
    ap.add_argument("--timeout", type=float, default=400, help="seconds before the launch is killed")
    ap.add_argument("--note", default="", help="free text stored with the result")
    a = ap.parse_args()
    bed = Testbed(TESTBED, BED, hosts=WORLD, rails=2, rates_mbit=[a.rate, a.rate], mptcp=False)
    token = secrets.token_hex(32)
    missing = torch_bench_missing(a.python, PKG)
    if missing:
        log(missing)
        return 1
    host = hostinfo.collect()
    work = tempfile.mkdtemp(prefix="signature-cost-")
    t_start = time.monotonic()

    def argv_for(first: str):
        return lambda rank: [a.python, WORKER, ",".join(map(str, SIZES)), str(a.small_iters),
                             str(a.large_iters), first]

    def env(rank: int) -> dict:
        return torch_rank_env(bed, rank, WORLD, PORT, PKG, token)

    # Both orders (signature_worker.py says why): the checked group first, then second.
    per_order = {}
    try:
        bed.up()
        for first in ("checked", "unchecked"):
            res = run_ranks(bed, WORLD, argv_for(first), env, timeout_s=a.timeout, log_dir=work,
                            tag=f"signature-{first}-first")
            if not res.ok():
                log(f"FAILED ({first} group first): {res.failure()} (logs in {work})")
                return 1
            reports = []
            for p in res.logs:
                with open(p, errors="replace") as f:
                    reports.append(ddp.parse_report(f.read()))
            per_order[first] = {str(n): signature_cost.size_ratio([r["rows"][str(n)] for r in reports])
                                for n in SIZES}
    finally:
        bed.down()
    rows = {str(n): signature_cost.both_orders(per_order["checked"][str(n)], per_order["unchecked"][str(n)])
            for n in SIZES}
    verdicts = signature_cost.judge(rows)
    host["loadavg_end"] = list(os.getloadavg())
    doc = {"kind": "signature-cost", "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "minutes": round((time.monotonic() - t_start) / 60, 1), "host": host, "note": a.note,
           "config": {"ranks": WORLD, "rails_mbit": [a.rate, a.rate], "sizes": SIZES,
                      "small_iters": a.small_iters, "large_iters": a.large_iters},
           "rows": rows, "goals": verdicts}
    lines = [f"Signature cost {doc['time_utc']} ({doc['minutes']} min) - {WORLD} ranks, 2 rails x {a.rate} "
             "Mbit/s (TBF, hack/testbed.sh), torch backend nezha, float32 SUM allreduce, checked vs "
             "unchecked group alternating blocks of 5 ops in one launch; trimmed mean (fastest 98 %), slowest "
             "rank; two launches, the checked group created first and second, geometric mean of their ratios",
             f"machine: {host['cpu_model']}, {host['cores']} cores; load average "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_start'])} at start, "
             f"{', '.join(f'{x:.2f}' for x in host['loadavg_end'])} at end", "",
             f"  {'size':>8s} {'checked':>12s} {'unchecked':>12s} {'ratio':>7s}  {'checked 1st':>11s} "
             f"{'checked 2nd':>11s}"]
    for n in SIZES:
        r = rows[str(n)]
        label = f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"
        lines.append(f"  {label:>8s} {r['on_s'] * 1e6:10.0f}us {r['off_s'] * 1e6:10.0f}us {r['ratio']:7.3f}  "
                     f"{r['checked_first']['ratio']:11.3f} {r['unchecked_first']['ratio']:11.3f}")
    lines.append("")
    for band, v in verdicts.items():
        if v["verdict"] == "NOT RUN":
            lines.append(f"NOT RUN  {band}")
            continue
        lines.append(f"{v['verdict']:5s} {band}: worst {v['worst']:.3f} at {v['worst_size']} B, median "
                     f"{v['median']:.3f} (target <= {v['target']})")
    text = "\n".join(lines) + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    write_result(RESULTS, "signature", stamp, {".json": doc, ".txt": text})
    sys.stdout.write(text)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
