#!/usr/bin/python3
"""Alltoall: the direct data path vs the allgather-composed alltoallv it replaced, at 2 and
4 ranks on the rail test bed (`make bench-alltoall`; needs root).

One nezha-bench launch per world size runs `--op alltoall --vs-composed --check`: at every size
it times the new alltoall, then the old composed path (tools/alltoall_composed.cc, the code
libnezha had before), in the same job on the same rails, so the ratio is side by side. Bed: 4
hosts x 2 rails shaped --rates (default 500,250 Mbit/s: 750 per host), adaptive policy.
Verdicts (harness/alltoall.py; our own criteria: the suite's goals set no alltoall number):
exact results, no size slower than 0.95x the old path, and >= n/2 x faster at the largest size.
With --tune, then `nezha-tune --algorithms` at each world size on the same bed (merging the
files, so the last one holds the rows of every N): its alltoall section times pairwise and
direct per size in one job (ratio to pairwise), and the table it writes is kept next to the
results (alltoall-<stamp>-algo.json). Writes alltoall-<stamp>.{json,txt}
and latest-alltoall.* to --out (bench/results).

  /usr/bin/python3 -m bench.run_alltoall [--worlds 2,4] [--min-bytes 16K] [--max-bytes 16M] [--factor 4]
                  [--warmup 3] [--iters 10] [--rates 500,250] [--tune] [--out DIR] [--note TEXT]
"""

import argparse
import datetime
import json
import os
import secrets
import sys
import tempfile
import time

from .harness import alltoall, hostinfo, results
from .harness.config import load_tunables
from .harness.launch import run_ranks
from .harness.sizes import parse_bytes
from .harness.testbed import Testbed

BED = "nzba2a"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min-bytes", default="16K")
    ap.add_argument("--max-bytes", default="16M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rates", default="500,250", help="Mbit/s per rail, every host (sum <= 1500)")
    ap.add_argument("--out", default=results.DEFAULT_DIR)
    ap.add_argument("--note", default="")
    ap.add_argument("--tune", action="store_true", help="then nezha-tune --algorithms at each world size")
    a = ap.parse_args(argv)
    a.worlds = [int(w) for w in a.worlds.split(",")]
    a.rates = [int(r) for r in a.rates.split(",")]
    if sum(a.rates) > 1500 or min(a.worlds) < 2 or max(a.worlds) > 4:
        ap.error("want rails summing to <= 1500 Mbit/s and worlds in 2..4")
    return a


def tune(a, tun, bed, work, port, rails, out, text) -> bool:
    """nezha-tune --algorithms at each world size, merged into one table; its alltoall lines
    (pairwise vs direct per size) go into the report."""
    tool = os.path.join(os.path.dirname(tun.nezha_bench), "nezha-tune")
    table = os.path.join(work, "algo.json")
    for world in a.worlds:
        port += 11
        argv_ = [tool, "--algorithms", "--min-bytes", "1K", "--max-bytes", "4M", "--factor", "4",
                 "--warmup", "3", "--iters", "10", "--out", table]
        if os.path.exists(table):
            argv_ += ["--merge", table]
        env = {"NEZHA_RAILS": ",".join(f"r{k}=r{k}:tcp" for k in range(rails)),
               "NEZHA_WORLD_SIZE": str(world), "NEZHA_RENDEZVOUS": f"{bed.addr(0, 0)}:{port}",
               "NEZHA_JOB_TOKEN": secrets.token_hex(32), "NEZHA_POLICY": "adaptive"}
        log(f"{world} ranks: nezha-tune {' '.join(argv_[1:])}")
        res = run_ranks(bed, world, lambda r: argv_, lambda r: {**env, "NEZHA_RANK": str(r)}, 900, work,
                        f"tune{world}")
        if not res.ok():
            text.append(f"nezha-tune at {world} ranks FAILED: {res.failure()}")
            return False
        with open(res.logs[0]) as f:
            lines = f.read().splitlines()
        section = alltoall.tune_section(lines)
        out.setdefault("tune", {})[world] = lines
        text += ["", f"nezha-tune --algorithms, {world} ranks, alltoall (us per operation, ratio to pairwise):"]
        text += section
    with open(table) as f:
        out["algo_table"] = json.load(f)
    text += ["", "nezha-tune's alltoall rows: " + json.dumps(out["algo_table"].get("alltoall"))]
    return True


def main(argv) -> int:
    a = parse_args(argv)
    tun = load_tunables()
    host = hostinfo.collect()
    work = tempfile.mkdtemp(prefix="alltoall-")
    port = tun.rendezvous_port + 600
    rails = len(a.rates)
    out = {"tool": "run_alltoall", "host": host, "rates_mbit": a.rates, "note": a.note, "worlds": {}}
    text = [f"# alltoall new vs composed, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}",
            f"# {host['cpu_model']}, {host['cores']} cores, load average {host['loadavg_start']}",
            f"# bed: {max(a.worlds)} hosts x {rails} rails at {a.rates} Mbit/s (TBF), policy adaptive"]
    ok = True
    with Testbed(tun.testbed_sh, BED, max(a.worlds), rails, a.rates, mptcp=False) as bed:
        for world in a.worlds:
            port += 1
            json_path = os.path.join(work, f"w{world}.json")
            token = secrets.token_hex(32)
            env = {"NEZHA_RAILS": ",".join(f"r{k}=r{k}:tcp" for k in range(rails)),
                   "NEZHA_WORLD_SIZE": str(world), "NEZHA_RENDEZVOUS": f"{bed.addr(0, 0)}:{port}",
                   "NEZHA_JOB_TOKEN": token, "NEZHA_POLICY": "adaptive"}
            argv_ = [tun.nezha_bench, "--op", "alltoall", "--vs-composed", "--check", "--dtype", "float32",
                     "--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--factor", str(a.factor),
                     "--warmup", str(a.warmup), "--iters", str(a.iters), "--json", json_path]
            log(f"{world} ranks: {' '.join(argv_[1:])}")
            # Generous: the composed path moves n x the bytes at ~100 Mbit/s worst case per rank.
            total = sum(parse_bytes("size", s) for s in (a.min_bytes, a.max_bytes)) * 8 * world
            res = run_ranks(bed, world, lambda r: argv_, lambda r: {**env, "NEZHA_RANK": str(r)},
                            60 + total * (a.warmup + a.iters) / 10e6, work, f"w{world}")
            if not res.ok():
                log(f"{world} ranks FAILED: {res.failure()}")
                out["worlds"][world] = {"error": res.failure()}
                text.append(f"{world} ranks: FAILED {res.failure()}")
                ok = False
                continue
            with open(json_path) as f:
                raw = json.load(f)
            rs = alltoall.rows(raw)
            vs = alltoall.verdicts(world, rs)
            out["worlds"][world] = {"rows": rs, "verdicts": vs, "nezha_bench": raw}
            text += ["", alltoall.table(world, rs)] + [f"  {name}: {v} ({d})" for name, v, d in vs]
            ok = ok and all(v == "PASS" for _, v, _ in vs)
        if a.tune:
            ok = tune(a, tun, bed, work, port, rails, out, text) and ok
    out["loadavg_end"] = list(os.getloadavg())
    text.append(f"# load average at end {out['loadavg_end']}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    files = {".json": out, ".txt": "\n".join(text) + "\n"}
    if out.get("algo_table"):
        files["-algo.json"] = out["algo_table"]
    paths = results.write_result(a.out, "alltoall", stamp, files)
    print("\n".join(text))
    log(f"wrote {', '.join(paths.values())} and their latest-alltoall* copies")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
