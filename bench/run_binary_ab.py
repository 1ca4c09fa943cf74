"""Two builds of nezha-bench side by side on one rail test bed: does a change move performance?

A refactor that claims "no behaviour change" is judged here: the same allreduce sweep runs with
build A (the baseline, e.g. the commit before) and build B (the change), in alternating launches
(A B, then B A, ...) on the same bed, so drift of the machine hits both alike. For every size the
ratio is time(B) / time(A) per pair of launches; the verdict is on the median over pairs at each
size >= --judge-from (default 1 MiB): PASS when every such median is within --tolerance (2 %).

Usage (root; from the repository root):
    python3 -m bench.run_binary_ab --a OLD/nezha-bench --b NEW/nezha-bench [--pairs 5]
        [--rates 800,300] [--ranks 2] [--min-bytes 1M] [--max-bytes 64M] [--iters 10]
        [--tcp-cc reno] [--tolerance 0.02]
"""

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time

from .harness import hostinfo
from .harness.launch import run_ranks
from .harness.results import DEFAULT_DIR as RESULTS_DIR, write_result
from .harness.testbed import Testbed

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "..", "hack", "testbed.sh")


def parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1M, 65536)")


def parse_rates(text: str) -> list[int]:
    try:
        rates = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates: comma-separated Mbit/s, not {text!r}")
    if len(rates) < 2 or any(r <= 0 for r in rates) or sum(rates) > 1500:
        raise argparse.ArgumentTypeError("--rates: at least two rails, each > 0, summing to <= 1500 "
                                         "Mbit/s (the machine's limit for shaped rails)")
    return rates


def launch(bed: Testbed, tool: str, args, port: int, work: str, tag: str) -> dict[int, float]:
    """One sweep with `tool`; {bytes: mean time in us} from rank 0's JSON."""
    json_path = os.path.join(work, tag + ".json")
    token = secrets.token_hex(32)
    rendezvous = f"{bed.addr(0, 0)}:{port}"
    rails = ",".join(f"r{k}=r{k}:tcp" for k in range(len(args.rates)))

    def argv(rank):
        a = [tool, "--op", "allreduce", "--dtype", "float32", "--min-bytes", str(args.min_bytes),
             "--max-bytes", str(args.max_bytes), "--factor", "2", "--warmup", "3",
             "--iters", str(args.iters), "--check", "--quiet"]
        return a + (["--json", json_path] if rank == 0 else [])

    def env(rank):
        return {"NEZHA_RAILS": rails, "NEZHA_RANK": str(rank), "NEZHA_WORLD_SIZE": str(args.ranks),
                "NEZHA_RENDEZVOUS": rendezvous, "NEZHA_JOB_TOKEN": token, "NEZHA_POLICY": "adaptive"}

    res = run_ranks(bed, args.ranks, argv, env, timeout_s=600, log_dir=work, tag=tag)
    if not res.ok():
        raise RuntimeError(f"{tag}: {res.failure()}")
    with open(json_path) as f:
        doc = json.load(f)
    return {int(r["bytes"]): float(r["time_us"]) for r in doc["results"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="baseline nezha-bench")
    p.add_argument("--b", required=True, help="nezha-bench of the change")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rates", type=parse_rates, default=[800, 300])
    p.add_argument("--min-bytes", type=parse_bytes, default=1 << 20)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--judge-from", type=parse_bytes, default=1 << 20)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--tcp-cc", default="reno")
    p.add_argument("--tolerance", type=float, default=0.02)
    args = p.parse_args(argv)
    for name in ("a", "b"):
        path = getattr(args, name)
        if not os.access(path, os.X_OK):
            p.error(f"--{name}: {path} is not an executable nezha-bench")
    if args.pairs < 1 or not 2 <= args.ranks <= 8:
        p.error("--pairs >= 1 and --ranks in 2..8")

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    hw = hostinfo.collect(args.tcp_cc)
    ratios: dict[int, list[float]] = {}
    times = {"a": {}, "b": {}}
    with tempfile.TemporaryDirectory(prefix="nezha-ab-") as work, \
            Testbed(TESTBED, "nzab", args.ranks, len(args.rates), args.rates, mptcp=False,
                    tcp_cc=args.tcp_cc) as bed:
        port = 29500
        for i in range(args.pairs):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            got = {}
            for which in order:
                port += 1
                got[which] = launch(bed, getattr(args, which), args, port, work, f"{which}{i}")
                for size, t in got[which].items():
                    times[which].setdefault(size, []).append(t)
            for size in got["a"]:
                if size in got["b"]:
                    ratios.setdefault(size, []).append(got["b"][size] / got["a"][size])
    lines = [f"nezha-bench A/B on the rail test bed, started {started}",
             f"machine: {hw['cpu_model']}, {hw['cores']} cores, kernel {hw['kernel']}, load at start "
             f"{' '.join(f'{x:.2f}' for x in hw['loadavg_start'])}",
             f"bed: {args.ranks} ranks x rails {args.rates} Mbit/s (TBF), congestion control "
             f"{args.tcp_cc or 'default'}; {args.pairs} pairs of launches, alternating order, "
             f"{args.iters} iterations per size",
             f"A = {args.a}", f"B = {args.b}", "",
             f"{'bytes':>10} {'A median us':>12} {'B median us':>12} {'B/A median':>11}  pairs"]
    verdict = "PASS"
    for size in sorted(ratios):
        med = statistics.median(ratios[size])
        judged = size >= args.judge_from
        if judged and abs(med - 1) > args.tolerance:
            verdict = "MISS"
        lines.append(f"{size:>10} {statistics.median(times['a'][size]):>12.0f} "
                     f"{statistics.median(times['b'][size]):>12.0f} {med:>11.3f}  "
                     + " ".join(f"{r:.3f}" for r in ratios[size]) + ("" if judged else "  (not judged)"))
    lines += ["", f"{verdict}: median B/A within {args.tolerance:.0%} at every size >= "
                  f"{args.judge_from} bytes"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    write_result(RESULTS_DIR, "ab", stamp, {".txt": text})
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
