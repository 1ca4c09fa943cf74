#!/usr/bin/python3
"""Nezha benchmark suite on the rail test bed (`make bench`, `make demo-runtime` with --quick).

4 ranks in network namespaces, two TBF-shaped rails, two scenarios (homogeneous 500/500 and
heterogeneous 800/300 Mbit/s), plus rail mixes drawn from a printed seed (2-3 rails of 100-800
Mbit/s, 2-4 ranks; --random, --seed). Series: Nezha adaptive / single / static (nezha-bench), Gloo's
ring on the best rail, Gloo over MPTCP across all rails and Gloo hand-split over all rails at the
best of a few static splits (>= 16 MiB; gloo-bench), and the sum-of-rails ceiling from the TBF
rates and from iperf3. Prints ratio and goal tables and writes JSON, text
and a PNG plot to bench/results/ (timestamped plus latest.*). Needs root (namespaces).
"""

import argparse
import dataclasses
import datetime
import importlib.util
import os
import secrets
import signal
import sys
import tempfile

from .harness import budget, hand_split, hostinfo, report
from .harness.chaos import Timeline
from .harness.chaos_run import CHAOS_SERIES, run_chaos
from .harness.ceiling import ceiling_algbw_gbps, single_rail_algbw_gbps
from .harness.config import FULL_BANDS, QUICK_BANDS, SCENARIOS, draw_scenarios, load_tunables
from .harness.goals import evaluate_all
from .harness.ratios import compute_ratios
from .harness.results import SUITE_KIND, latest_name
from .harness.runner import RunContext, log, run_scenario
from .harness.series import OPT_IN_SERIES, SERIES, by_name, paired_args, warmup_for
from .harness.sizes import clip_bands, parse_bytes
from .harness.testbed import Testbed, TestbedError

BUSY_NOTE = ("numbers from a shared 2-core VM while other builds ran; compare ratios measured in "
             "this run, not absolute values")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 KiB..32 MiB, fewer iterations (smoke run, make demo-runtime)")
    ap.add_argument("--scenario", action="append", choices=[s.name for s in SCENARIOS],
                    help="run only this scenario (repeatable; default: all)")
    ap.add_argument("--series", action="append", metavar="NAME",
                    help=f"run only this series (repeatable; default: all of {', '.join(s.name for s in SERIES)})")
    ap.add_argument("--random", type=int, default=None, metavar="N",
                    help="rail mixes drawn at random besides the fixed scenarios (default 2; 0 with --scenario or --chaos)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random rail mixes (default: a fresh one, printed)")
    ap.add_argument("--min-bytes", default="1K", help="smallest size (default 1K)")
    ap.add_argument("--max-bytes", default=None, help="largest size (default 256M, 32M with --quick)")
    ap.add_argument("--tcp-cc", default="", metavar="ALGO",
                    help="TCP congestion control of every bed host (hack/testbed.sh --tcp-cc; default: the "
                         "machine's, recorded with the results)")
    ap.add_argument("--no-iperf", action="store_true", help="skip the iperf3 measurement of the rails")
    ap.add_argument("--no-check", action="store_true", help="do not pass --check to the tools")
    ap.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ap.add_argument("--note", default=BUSY_NOTE, help="free text stored with the results (default: busy-machine note)")
    ap.add_argument("--chaos", action="store_true",
                    help="run only the chaos scenario: loop one size, cut the slow rail of one rank, restore it")
    ap.add_argument("--report", metavar="JSON",
                    help="re-judge the goals of an earlier result JSON, rewrite its .txt and print it; runs nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and time estimate, run nothing")
    ap.add_argument("--kind", default=None, metavar="NAME",
                    help="results kind: files <kind>-<stamp>.* and latest-<kind>.* (default bench, chaos with "
                         "--chaos); a kind other than bench never rewrites bench/README.md")
    a = ap.parse_args(argv)
    bands = list(QUICK_BANDS if a.quick else FULL_BANDS)
    try:
        lo = parse_bytes("--min-bytes", a.min_bytes)
        hi = parse_bytes("--max-bytes", a.max_bytes) if a.max_bytes else bands[-1].max_bytes
        if a.chaos:
            known = [c.name for c in CHAOS_SERIES]
            bad = [n for n in a.series or [] if n not in known]
            if bad:
                raise ValueError(f"--series: unknown chaos series {bad[0]!r} (want one of {', '.join(known)})")
            a.series_specs = []
        else:
            a.series_specs = by_name(a.series) if a.series else [s for s in SERIES if s.name not in OPT_IN_SERIES]
    except ValueError as e:
        ap.error(str(e))
    a.bands = clip_bands(bands, lo, hi)
    if not a.bands:
        ap.error(f"--min-bytes/--max-bytes: no size of the {'quick' if a.quick else 'full'} sweep lies in "
                 f"{a.min_bytes}..{a.max_bytes}")
    a.scenarios = [s for s in SCENARIOS if not a.scenario or s.name in a.scenario]
    if a.random is None:
        a.random = 0 if a.scenario or a.chaos else 2
    if not 0 <= a.random <= 8:
        ap.error(f"--random: want 0..8 rail mixes, got {a.random}")
    if a.seed is None:
        a.seed = secrets.randbelow(1 << 31)
    if a.seed < 0:
        ap.error(f"--seed: want a non-negative integer, got {a.seed}")
    if hostinfo.tcp_cc_error(a.tcp_cc):
        ap.error(hostinfo.tcp_cc_error(a.tcp_cc))
    if a.random and not a.chaos:
        a.scenarios += list(draw_scenarios(a.seed, a.random))
    if a.chaos:
        # The chaos scenario cuts the slow rail, so it needs rails of different speeds.
        a.scenarios = [s for s in SCENARIOS if s.name == "heterogeneous"]
    return a


def estimate_seconds(a, tun) -> float:
    """Rough total: every series at its scenario's expected speed (Nezha near the ceiling)."""
    total = 0.0
    for scen in a.scenarios:
        single = single_rail_algbw_gbps(scen.rates_mbit[scen.best_rail()], scen.world(tun.ranks))
        multi = ceiling_algbw_gbps(list(scen.rates_mbit), scen.world(tun.ranks)) * 0.9
        total += 3 * tun.iperf_seconds * (not a.no_iperf) + 2
        for spec in a.series_specs:
            speed = multi if spec.policy in ("adaptive", "static") or spec.mptcp or spec.hand_split else single
            bands, launches = a.bands, 1
            if spec.hand_split:
                if not hand_split.applies(scen):
                    continue
                bands = hand_split.bands_for(a.bands)
                launches = len(hand_split.candidate_splits(scen.rates_mbit, scen.best_rail()))
            for band in bands:
                total += launches * budget.band_seconds_all_repeats(
                    band, speed, warmup_for(spec, band, tun.adaptive_warmup), paired=bool(paired_args(spec, band)))
    return total


def hand_split_plan(a) -> str:
    """The hand split's part of the plan: which static splits per scenario. At run time they are
    centred on the iperf3-measured rates, so the plan shows them around the TBF rates."""
    if not any(s.hand_split for s in a.series_specs):
        return ""
    if not hand_split.bands_for(a.bands):
        return f"; {hand_split.SERIES_NAME}: not run (no size >= {hand_split.MIN_BYTES >> 20}M)"
    per_scen = []
    for scen in a.scenarios:
        if hand_split.applies(scen):
            splits = hand_split.candidate_splits(scen.rates_mbit, scen.best_rail())
            per_scen.append(f"{scen.name} {', '.join(hand_split.format_split(x) for x in splits)}")
    bands = ", ".join(b.label() for b in hand_split.bands_for(a.bands))
    return (f"; {hand_split.SERIES_NAME} on {bands}, best per size of the static splits (shares r0/r1/..., "
            f"shown around the TBF rates; the run centres them on iperf3): {'; '.join(per_scen) or 'none'}")


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
DEFAULT_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def publishes_readme(a, tun) -> bool:
    """A run that writes the repository's results/latest.json rewrites bench/README.md from it, so
    the two never disagree (tests/test_random_scenarios.py checks it)."""
    return (not a.chaos and result_kind(a) == SUITE_KIND
            and os.path.realpath(tun.results_dir) == os.path.realpath(DEFAULT_RESULTS))


def result_kind(a) -> str:
    return a.kind or ("chaos" if a.chaos else SUITE_KIND)


def rereport(path: str) -> int:
    """Recompute goals and the text summary of a stored result (after a change in judging or
    formatting), without running anything."""
    import json

    try:
        with open(path) as f:
            doc = json.load(f)
        if "chaos" not in doc:
            # Ratios too are computed again from the series' rows: a ratio added since the run
            # (Nezha on one rail / Gloo on the same rail) is then judged on it as well.
            for s in doc["scenarios"]:
                s["ratios"] = compute_ratios({n: x.get("results", []) for n, x in s["series"].items()}, s["sizes"])
            doc["goals"] = evaluate_all({s["name"]: s["ratios"] for s in doc["scenarios"]})
        text = report.summary_text(doc)
    except (OSError, ValueError, KeyError) as e:
        print(f"run_bench.py: --report: {path}: {e}", file=sys.stderr)
        return 2
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    with open(os.path.splitext(path)[0] + ".txt", "w") as f:
        f.write(text)
    if "chaos" not in doc and os.path.realpath(path) == os.path.realpath(os.path.join(DEFAULT_RESULTS, "latest.json")):
        report.update_readme(README, doc)
    print(text, end="")
    return 0


def run_scenarios(a, tun, work_dir: str, doc: dict) -> None:
    """Every scenario on a bed of its shape (ranks x rails): one bed while the shape holds, a new
    one when a drawn mix needs more hosts or rails."""
    bed, port = None, 0
    try:
        for scen in a.scenarios:
            world = scen.world(tun.ranks)
            if bed is None or (bed.hosts, bed.rails) != (world, len(scen.rates_mbit)):
                if bed is not None:
                    bed.__exit__(None, None, None)
                    bed = None
                b = Testbed(tun.testbed_sh, tun.bed, world, len(scen.rates_mbit), scen.rates_mbit, mptcp=True,
                            tcp_cc=a.tcp_cc)
                bed = b.__enter__()
            ctx = RunContext(tun=dataclasses.replace(tun, ranks=world), bed=bed, bands=a.bands, work_dir=work_dir,
                             check=not a.no_check, iperf=not a.no_iperf, port=port)
            doc["scenarios"].append(run_scenario(ctx, scen, a.series_specs))
            port = ctx.port
    finally:
        if bed is not None:
            bed.__exit__(None, None, None)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.report:
        return rereport(a.report)
    try:
        tun = load_tunables()
    except ValueError as e:
        print(f"run_bench.py: {e}", file=sys.stderr)
        return 2
    timeline = Timeline()
    if a.chaos:
        est = len([c for c in CHAOS_SERIES if not a.series or c.name in a.series]) * (timeline.loop_seconds + 10)
        plan = (f"chaos run: {', '.join(c.name for c in CHAOS_SERIES if not a.series or c.name in a.series)}; "
                f"estimated {est / 60:.1f} min")
    else:
        est = estimate_seconds(a, tun)
        plan = (f"{'quick' if a.quick else 'full'} run: scenarios "
                f"{', '.join(f'{s.name} ({chr(47).join(map(str, s.rates_mbit))} Mbit/s x {s.world(tun.ranks)} ranks)' for s in a.scenarios)}"
                + (f" [random mixes: seed {a.seed}]" if a.random and not a.chaos else "") + "; "
            f"series {', '.join(s.name for s in a.series_specs)}; bands "
                f"{', '.join(f'{b.label()} (w{b.warmup}/i{b.iters}/x{b.repeats})' for b in a.bands)}; "
                f"estimated {est / 60:.1f} min" + hand_split_plan(a))
    if a.dry_run:
        print(plan)
        return 0
    if os.geteuid() != 0:
        print("run_bench.py: needs root (it builds network namespaces); run it as root or via `make bench`",
              file=sys.stderr)
        return 2
    if not a.no_plot and importlib.util.find_spec("matplotlib") is None:
        # Checked before the run, not after it: the plot comes after every series has run.
        print(f"run_bench.py: matplotlib is missing for {sys.executable} (the plot needs it); use "
              "/usr/bin/python3 as `make bench` does, install python3-matplotlib, or pass --no-plot",
              file=sys.stderr)
        return 2
    # SIGTERM (e.g. a CI timeout) must still tear the bed down: turn it into SystemExit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    log(plan)
    started = datetime.datetime.now(datetime.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    cache = os.environ.get("NEZHA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "nezha")
    os.makedirs(os.path.join(cache, "bench"), exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix=f"{stamp}-", dir=os.path.join(cache, "bench"))
    os.chmod(work_dir, 0o755)
    log(f"tool logs and per-band JSON: {work_dir}")
    mode = "chaos" if a.chaos else "quick" if a.quick else "full"
    doc = {"schema": "nezha-bench-suite/1", "mode": mode, "ranks": tun.ranks,
           "started": started.isoformat(timespec="seconds"), "hardware": hostinfo.collect(a.tcp_cc),
           "note": a.note, "bed": tun.bed, "work_dir": work_dir,
           "bands": [b.__dict__ for b in a.bands], "scenarios": []}
    if a.random and not a.chaos:
        doc["seed"] = a.seed
    try:
        if a.chaos:
            first = a.scenarios[0]
            with Testbed(tun.testbed_sh, tun.bed, tun.ranks, len(first.rates_mbit), first.rates_mbit, mptcp=True,
                         tcp_cc=a.tcp_cc) as bed:
                ctx = RunContext(tun=tun, bed=bed, bands=a.bands, work_dir=work_dir, check=not a.no_check,
                                 iperf=not a.no_iperf)
                doc["chaos"] = run_chaos(ctx, first, a.series, timeline)
        else:
            run_scenarios(a, tun, work_dir, doc)
    except TestbedError as e:
        print(f"run_bench.py: test bed: {e}", file=sys.stderr)
        return 1
    finally:
        log(f"test bed {tun.bed} removed")
    finished = datetime.datetime.now(datetime.timezone.utc)
    doc["finished"] = finished.isoformat(timespec="seconds")
    doc["duration_s"] = round((finished - started).total_seconds(), 1)
    doc["hardware"]["loadavg_end"] = list(os.getloadavg())
    if not a.chaos:
        doc["goals"] = evaluate_all({s["name"]: s["ratios"] for s in doc["scenarios"]})

    plot_fn = None
    if not a.no_plot:
        # matplotlib is slow to import; only when needed.
        from .plot import plot as plot_fn, plot_chaos

        if a.chaos:
            plot_fn = plot_chaos
    paths = report.write_outputs(doc, tun.results_dir, stamp, plot_fn, prefix=result_kind(a))
    print()
    print(report.summary_text(doc), end="")
    print()
    for suffix, p in paths.items():
        shown = os.path.relpath(p) if not os.path.relpath(p).startswith("..") else p
        log(f"{suffix}: {shown} (and {latest_name(result_kind(a), suffix)})")
    if publishes_readme(a, tun):
        report.update_readme(README, doc)
        log(f"README: {os.path.relpath(README)} latest results rewritten")
    log(f"done in {doc['duration_s'] / 60:.1f} min")
    failed = [f"{sc['name']}/{s['name']}" for sc in doc["scenarios"] for s in sc["series"].values()
              if s.get("status") in ("failed", "partial")]
    # In the chaos run a series that failed under the cut is a result, not a harness failure;
    # only a series that produced no trace is.
    failed += [f"chaos/{n}" for n, s in doc.get("chaos", {}).get("series", {}).items() if s["status"] == "failed"]
    if failed:
        log(f"series with failures: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
