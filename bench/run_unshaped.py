#!/usr/bin/python3
"""Targets (B) and (U) on UNSHAPED rails (`make bench-unshaped`; needs root).

On TBF-shaped rails Nezha on one rail and Gloo both run at the wire rate, so a runtime can only
be faster than Gloo where the CPU is the limit: here, a 2-host x 2-rail bed of plain veth pairs
(no TBF) on the machine's 2 cores. Series, interleaved size by size (rotating who goes first):
nezha-single (NEZHA_POLICY=single), nezha-adaptive (both rails), gloo-best-rail (gloo-bench on
r0), plus any --knob series (nezha-single with some NEZHA_* variables set).

Per series and size: busbw (the tool's own timing) and CPU cycles per byte = user+sys CPU seconds
of both rank processes (rusage of each rank, harness/rusage_exec.py) x the nominal clock
(/proc/cpuinfo "cpu MHz") / bytes reduced. The CPU of start-up, rendezvous, probe and warmup is
taken out by running each (series, size) twice, n_s and n_l timed ops after the same warmup, and
differencing (harness/unshaped.py); it is reported as "fixed CPU". The whole machine's busy time
over the same launches (/proc/stat, includes ksoftirqd and everyone else) is printed next to it.

Verdicts: (B) nezha-single >= 1.05x gloo-best-rail busbw at every size >= 64 KiB; (U) the better
Nezha series >= 1.2x gloo-best-rail at every size; (C) nezha-adaptive (two rails) >= 1.3x the
bytes per CPU second of gloo-best-rail (one rail) at every size. --profile SIZE then runs rank 0
of nezha-adaptive and of gloo-best-rail once more at SIZE under `perf record` and says where its
cycles go (copies, reductions, kernel; harness/cpu_profile.py). Writes <kind>-<stamp>.{json,txt}
and latest-<kind>.* to --out (bench/results; kind "unshaped" unless --kind).

  /usr/bin/python3 -m bench.run_unshaped [--min-bytes 64K] [--max-bytes 64M] [--series NAME,...]
      [--knob NEZHA_X=V,...]... [--sizes 64K,1M] [--repeats 1] [--target-bytes 1G] [--iperf-seconds 3]
      [--profile 16M] [--tcp-cc ALGO] [--kind NAME] [--out DIR] [--note TEXT]
"""

import argparse
import datetime
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .harness import budget, cpu_profile, hostinfo, iperf, results
from .harness.config import Scenario, load_tunables
from .harness.launch import run_ranks
from .harness.series import SeriesSpec, by_name, make_launch
from .harness.sizes import Band, format_bytes, parse_bytes, sweep
from .harness.testbed import Testbed, TestbedError, diff_tx
from .harness.unshaped import (ADAPTIVE, GLOO, SINGLE, Launch, nominal_mhz, busy_ticks,
                              parse_knob, plan_size, summarize, verdicts)
from .harness.unshaped_report import table, verdict_lines

BED = "nzbun"
HOSTS, RAILS = 2, 2
SCENARIO = Scenario("unshaped", (0, 0), HOSTS)  # rate 0 = no TBF; r0 is the "best" (first) rail
RUSAGE_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness", "rusage_exec.py")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-bytes", default="64K")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--sizes", default="", help="comma-separated sizes instead of the 2x sweep (e.g. 64K,1M,64M)")
    ap.add_argument("--series", default=f"{SINGLE},{ADAPTIVE},{GLOO}",
                    help="comma-separated base series (default: all three)")
    ap.add_argument("--knob", action="append", default=[], metavar="NEZHA_X=V[,NEZHA_Y=W]",
                    help="an extra nezha-single series with these variables (repeatable)")
    ap.add_argument("--repeats", type=int, default=1, help="(short, long) launch pairs per series and size; median")
    ap.add_argument("--target-bytes", default="1G", help="bytes the long launch reduces per size (default 1G)")
    ap.add_argument("--warmup-bytes", default="64M", help="warmup per launch, 3..20 ops (default 64M)")
    ap.add_argument("--iperf-seconds", type=int, default=3, help="iperf3 on r0 first (0: skip)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--out", default=results.DEFAULT_DIR)
    ap.add_argument("--note", default="")
    ap.add_argument("--profile", default="", metavar="SIZE",
                    help="after the sweep, profile rank 0 of nezha-adaptive and gloo-best-rail at SIZE (perf record)")
    ap.add_argument("--tcp-cc", default="", metavar="ALGO",
                    help="TCP congestion control of the bed's hosts (default: the machine's, recorded)")
    ap.add_argument("--kind", default="unshaped", help="results kind: <kind>-<stamp>.* and latest-<kind>.*")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    a = ap.parse_args(argv)
    if hostinfo.tcp_cc_error(a.tcp_cc):
        ap.error(hostinfo.tcp_cc_error(a.tcp_cc))
    try:
        if a.sizes:
            a.sizes = sorted({parse_bytes("--sizes", x) for x in a.sizes.split(",") if x.strip()})
        else:
            a.sizes = sweep(parse_bytes("--min-bytes", a.min_bytes), parse_bytes("--max-bytes", a.max_bytes))
        a.target = parse_bytes("--target-bytes", a.target_bytes)
        a.warmup = parse_bytes("--warmup-bytes", a.warmup_bytes)
        a.profile_bytes = parse_bytes("--profile", a.profile) if a.profile else 0
        base = [n.strip() for n in a.series.split(",") if n.strip()]
        a.specs = [(s, {}) for s in by_name(base)] if base else []
        for k in a.knob:
            name, env = parse_knob(k)
            a.specs.append((SeriesSpec(name, name, "nezha", policy="single"), env))
    except ValueError as e:
        ap.error(str(e))
    if not a.specs or a.repeats < 1:
        ap.error("want at least one series and --repeats >= 1")
    return a


class Bench:
    def __init__(self, a, tun, bed: Testbed, work: str):
        self.a, self.tun, self.bed, self.work = a, tun, bed, work
        self.port = tun.rendezvous_port + 400
        self.launches: list[dict] = []

    def launch(self, spec: SeriesSpec, env_extra: dict, size: int, warmup: int, iters: int, tag: str,
               rank0_prefix: tuple = ()) -> Launch:
        self.port += 1  # fresh port: the previous job's sockets may be in TIME_WAIT
        json_path = os.path.join(self.work, tag + ".json")
        store = tempfile.mkdtemp(prefix="store-", dir=self.work)
        tool = self.tun.nezha_bench if spec.tool == "nezha" else self.tun.gloo_bench
        band = Band(size, size, warmup, iters)
        ln = make_launch(spec, SCENARIO, HOSTS, tool, band, warmup, json_path, not self.a.no_check, store,
                         f"{self.bed.addr(0, 0)}:{self.port}")
        ru = [os.path.join(self.work, f"{tag}.rusage{r}.json") for r in range(HOSTS)]
        expected = budget.LAUNCH_SECONDS + (warmup + iters) * size / 0.05e9  # 50 MB/s: only hangs time out
        tx0, busy0 = self.bed.rail_tx_bytes(), busy_ticks(read("/proc/stat"))
        res = run_ranks(self.bed, HOSTS,
                        lambda r: [sys.executable, RUSAGE_EXEC, ru[r], "--", *(rank0_prefix if r == 0 else ()),
                                   *ln.argv(r)],
                        lambda r: {**ln.env(r), **env_extra}, budget.launch_timeout(expected), self.work, tag)
        busy = (busy_ticks(read("/proc/stat")) - busy0) * TICK_S
        tx = diff_tx(tx0, self.bed.rail_tx_bytes())
        shutil.rmtree(store, ignore_errors=True)
        if not res.ok():
            raise RuntimeError(f"{tag}: {res.failure()}")
        cpu = [json.loads(read(p)) for p in ru]
        row = json.loads(read(json_path))["results"][0]
        if row["check"] not in ("ok", "skipped"):
            raise RuntimeError(f"{tag}: result check {row['check']}")
        rec = {"tag": tag, "series": spec.name, "size": size, "warmup": warmup, "iters": iters,
               "seconds": round(res.seconds, 3), "busbw_gbps": row["busbw_gbps"], "time_us": row["time_us"],
               "check": row["check"], "rank_cpu": cpu, "machine_busy_s": round(busy, 3), "rail_tx_bytes": tx,
               "env": {k: v for k, v in ln.env(0).items() if k != "NEZHA_JOB_TOKEN"} | env_extra}
        self.launches.append(rec)
        self.last_share = "/".join(f"{b / max(sum(tx), 1):.0%}" for b in tx)
        return Launch(iters, sum(c["user_s"] + c["sys_s"] for c in cpu), row["busbw_gbps"], busy)


def profile_series(b: Bench, specs: list, size: int, plan) -> dict:
    """Rank 0 of each profiled series once more at `size`, under perf record (not counted in the
    cost table: perf's own sampling costs CPU); perf report's self time summed into buckets."""
    out = {}
    for spec, env in specs:
        data = os.path.join(b.work, f"profile.{spec.name}.perf.data")
        tag = f"{spec.name}.{format_bytes(size)}.profile"
        b.launch(spec, env, size, plan.warmup, plan.long_iters, tag, tuple(cpu_profile.perf_record_argv(data)))
        rep = subprocess.run(cpu_profile.perf_report_argv(data), capture_output=True, text=True, timeout=300)
        if rep.returncode != 0:
            raise RuntimeError(f"{tag}: perf report exit {rep.returncode}: {rep.stderr.strip()[-300:]}")
        out[spec.name] = cpu_profile.summarize(cpu_profile.parse_report(rep.stdout))
        log(f"  {cpu_profile.summary_line(spec.name, out[spec.name])}")
    return out


def main(argv=None) -> int:
    a = parse_args(argv)
    tun = load_tunables()
    plans = [plan_size(s, a.target, a.warmup) for s in a.sizes]
    names = [s.name for s, _ in a.specs]
    ops = sum(p.warmup * 2 + p.short_iters + p.long_iters for p in plans)
    log(f"unshaped: {HOSTS} hosts x {RAILS} unshaped rails; series {', '.join(names)}; sizes "
        f"{format_bytes(a.sizes[0])}..{format_bytes(a.sizes[-1])}; {a.repeats} repeat(s); "
        f"{2 * len(plans) * len(names) * a.repeats} launches, {ops} ops per series and repeat")
    for p in plans:
        log(f"  {format_bytes(p.size):>5s}: warmup {p.warmup}, short {p.short_iters}, long {p.long_iters} ops")
    if a.dry_run:
        return 0
    if os.geteuid() != 0:
        print("run_unshaped.py: needs root (network namespaces); use `make bench-unshaped`", file=sys.stderr)
        return 2
    for spec, _ in a.specs:
        tool = tun.nezha_bench if spec.tool == "nezha" else tun.gloo_bench
        if not os.access(tool, os.X_OK):
            print(f"run_unshaped.py: {tool} not built (make build-runtime build-bench)", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    info = hostinfo.collect(a.tcp_cc)
    info["setup"] = "network namespaces on one VM, UNSHAPED veth rails (no TBF): the CPU is the limit"
    mhz = nominal_mhz(read("/proc/cpuinfo"))
    info["cpu_mhz_nominal"] = mhz
    work = tempfile.mkdtemp(prefix=f"nzun-{started:%Y%m%dT%H%M%S}-", dir="/tmp")
    log(f"hardware: {info['cpu_model']}, {info['cores']} cores, {mhz:.0f} MHz (nominal, /proc/cpuinfo); "
        f"load average {', '.join(f'{x:.2f}' for x in info['loadavg_start'])}; logs in {work}")
    pairs: dict[str, dict[int, list]] = {n: {p.size: [] for p in plans} for n in names}
    failures: list[str] = []
    doc = {"schema": "nezha-unshaped/v1", "started": started.isoformat(timespec="seconds"), "hardware": info,
           "note": a.note, "args": {"sizes": a.sizes, "repeats": a.repeats, "target_bytes": a.target,
                                    "warmup_bytes": a.warmup, "series": names, "knobs": a.knob},
           "plans": [p.__dict__ for p in plans]}
    try:
        with Testbed(tun.testbed_sh, BED, HOSTS, RAILS, [0] * RAILS, mptcp=False, tcp_cc=a.tcp_cc) as bed:
            if a.iperf_seconds:
                mbit = iperf.measure_rails(bed, [0], a.iperf_seconds)[0]
                doc["iperf_r0_mbit"] = mbit
                log(f"iperf3 on unshaped r0, one flow: {mbit:.0f} Mbit/s")
            b = Bench(a, tun, bed, work)
            turn = 0
            for p in plans:
                for rep in range(a.repeats):
                    order = a.specs[turn % len(a.specs):] + a.specs[:turn % len(a.specs)]
                    turn += 1
                    for spec, env in order:
                        tag = f"{spec.name}.{format_bytes(p.size)}.rep{rep}".replace("[", ".").replace("]", "")
                        try:
                            short = b.launch(spec, env, p.size, p.warmup, p.short_iters, tag + ".short")
                            long = b.launch(spec, env, p.size, p.warmup, p.long_iters, tag + ".long")
                        except (RuntimeError, OSError, ValueError, KeyError, IndexError) as e:
                            failures.append(str(e))
                            log(f"  FAILED {e}")
                            continue
                        pairs[spec.name][p.size].append((short, long))
                        log(f"  {spec.name:34s} {format_bytes(p.size):>5s}  busbw {long.busbw_gbps:6.3f} GB/s  "
                            f"CPU {short.cpu_s:5.2f}/{long.cpu_s:5.2f} s  rail tx r0/r1 {b.last_share}")
            profiled = [(spec, env) for spec, env in a.specs if spec.name in (ADAPTIVE, GLOO)]
            if a.profile_bytes and profiled:
                log(f"profile: rank 0 at {format_bytes(a.profile_bytes)} under perf record")
                try:
                    doc["profile"] = {"size": a.profile_bytes, "rank": 0, "series": profile_series(
                        b, profiled, a.profile_bytes, plan_size(a.profile_bytes, a.target, a.warmup))}
                except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                    failures.append(f"profile: {e}")
                    log(f"  FAILED profile: {e}")
            doc["launches"] = b.launches
    except TestbedError as e:
        print(f"run_unshaped.py: test bed: {e}", file=sys.stderr)
        return 1
    info["loadavg_end"] = list(os.getloadavg())
    cells = {n: {s: summarize(s, ps, mhz) for s, ps in by.items() if ps} for n, by in pairs.items()}
    v = verdicts(cells, a.sizes)
    doc["cells"] = {n: {str(s): c.__dict__ for s, c in by.items()} for n, by in cells.items()}
    doc["verdicts"] = v
    doc["failures"] = failures
    finished = datetime.datetime.now(datetime.timezone.utc)
    doc["duration_s"] = round((finished - started).total_seconds(), 1)
    lines = [f"Busbw and CPU per byte on unshaped rails, started {started:%Y-%m-%dT%H:%M:%SZ}, {doc['duration_s']:.0f} s",
             f"hardware: {info['cpu_model']}, {info['cores']} cores, {mhz:.0f} MHz nominal (/proc/cpuinfo), "
             f"kernel {info['kernel']}; {HOSTS} hosts (netns) x {RAILS} veth rails, no TBF",
             f"load average at start {', '.join(f'{x:.2f}' for x in info['loadavg_start'])}, "
             f"at end {', '.join(f'{x:.2f}' for x in info['loadavg_end'])}",
             "busbw: the tool's timing of the long launch; cyc/B ranks: (user+sys CPU s of both rank processes per "
             "timed op, from the short/long difference) x nominal clock / op size; cyc/B machine: the same from "
             "/proc/stat busy time (includes ksoftirqd and anything else running); fixed CPU: start-up, rendezvous, "
             "probe, warmup of one launch; " + f"median of {a.repeats} repeat(s)"]
    if "iperf_r0_mbit" in doc:
        lines.insert(3, f"iperf3, one TCP flow on r0: {doc['iperf_r0_mbit']:.0f} Mbit/s")
    if a.note:
        lines.append(f"note: {a.note}")
    lines += [""] + table(cells, names, a.sizes) + [""] + verdict_lines(v)
    if "profile" in doc:
        lines += ["", f"where rank 0's cycles go at {format_bytes(doc['profile']['size'])} (perf record, self time, "
                      "% of the process's samples; softirq work in ksoftirqd is not in it):"]
        lines += [f"  {cpu_profile.summary_line(n, p)}" for n, p in doc["profile"]["series"].items()]
    if failures:
        lines += ["", "failures:"] + [f"  {f}" for f in failures]
    text = "\n".join(lines) + "\n"
    print()
    print(text, end="")
    paths = results.write_result(a.out, a.kind, f"{started:%Y%m%dT%H%M%SZ}", {".json": doc, ".txt": text})
    log(f"wrote {', '.join(paths.values())} and their latest-{a.kind}.* copies")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
