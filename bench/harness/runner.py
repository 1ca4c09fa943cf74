"""Runs the suite on a live test bed: per scenario, shape the rails, measure them with iperf3,
run every series band by band, and assemble raw series, ceilings and ratios. Needs root."""

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from . import budget, hand_split, iperf
from .ceiling import ceiling_algbw_gbps, single_rail_algbw_gbps
from .config import Scenario, Tunables
from .launch import run_ranks
from .merge import constant_series, median_of_repeats, merge_band_docs
from .ratios import compute_ratios
from .series import SeriesSpec, make_launch, paired_args, warmup_for
from .sizes import Band
from .testbed import Testbed, diff_tx


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class RunContext:
    tun: Tunables
    bed: Testbed
    bands: list[Band]
    work_dir: str  # per-band JSON and rank logs
    check: bool
    iperf: bool
    port: int = 0

    def next_port(self) -> int:
        # A fresh port per launch: the previous job's sockets may still be in TIME_WAIT. Two per
        # launch: a paired launch (Band.paired) joins its second communicator on port + 1.
        self.port = (self.port or self.tun.rendezvous_port) + 2
        return self.port


def tool_path(ctx: RunContext, spec: SeriesSpec) -> str:
    return ctx.tun.nezha_bench if spec.tool == "nezha" else ctx.tun.gloo_bench


def missing_tool(ctx: RunContext, spec: SeriesSpec) -> str:
    path = tool_path(ctx, spec)
    if os.access(path, os.X_OK):
        return ""
    hint = "make build-runtime" if spec.tool == "nezha" else "cmake -S bench/baselines/gloo -B build/bench"
    return f"{path} not built ({hint})"


def pinned_argv(argv_for):
    """argv_for with rank r's tool pinned to core r % cores (Band.pinned says why)."""
    cores = os.cpu_count() or 1
    return lambda rank: ["taskset", "--cpu-list", str(rank % cores), *argv_for(rank)]


def run_launch(ctx: RunContext, scenario: Scenario, spec: SeriesSpec, band: Band, repeat: int,
               split: tuple[float, ...] = ()) -> tuple[dict, object]:
    """One launch of one series on one band (for the hand split: at one static split). Returns
    (run record, (json path, doc) or an error string)."""
    world = ctx.tun.ranks
    warmup = warmup_for(spec, band, ctx.tun.adaptive_warmup)
    tag = f"{scenario.name}.{spec.name}.{band.label()}" + (f".rep{repeat}" if band.repeats > 1 else "")
    if split:
        tag += ".split" + hand_split.format_split(split).replace("/", "-")  # part of file names
    json_path = os.path.join(ctx.work_dir, tag + ".json")
    store_dir = tempfile.mkdtemp(prefix="store-", dir=ctx.work_dir)
    rendezvous = f"{ctx.bed.addr(0, scenario.best_rail())}:{ctx.next_port()}"
    launch = make_launch(spec, scenario, world, tool_path(ctx, spec), band, warmup, json_path, ctx.check,
                         store_dir, rendezvous, split)
    # Timeout from the slowest plausible speed (best single rail), so only hangs are killed.
    best_rate = scenario.rates_mbit[scenario.best_rail()]
    expected = budget.band_seconds(band, single_rail_algbw_gbps(best_rate, world), warmup,
                                   paired=bool(paired_args(spec, band)))
    tx0, mp0 = ctx.bed.rail_tx_bytes(), ctx.bed.mptcp_counters()
    argv_for = pinned_argv(launch.argv) if band.pinned else launch.argv
    res = run_ranks(ctx.bed, world, argv_for, launch.env, budget.launch_timeout(expected), ctx.work_dir, tag)
    tx = diff_tx(tx0, ctx.bed.rail_tx_bytes())
    mp = {k: v - mp0[k] for k, v in ctx.bed.mptcp_counters().items()}
    shutil.rmtree(store_dir, ignore_errors=True)
    run = {"band": band.label(), "repeat": repeat, **({"split": list(split)} if split else {}),
           "warmup": warmup, "iters": band.iters,
           "seconds": round(res.seconds, 2), "rail_tx_bytes": tx, "ok": res.ok(), "argv_rank0": list(argv_for(0)),
           "env_rank0": {k: v for k, v in launch.env(0).items() if k != "NEZHA_JOB_TOKEN"}, "logs": res.logs}
    if spec.mptcp:
        run["mptcp_counters"] = mp
    result: object
    if res.ok():
        try:
            with open(json_path) as f:
                result = (json_path, json.load(f))
        except (OSError, ValueError) as e:
            run["ok"] = False
            result = f"{band.label()}: rank 0 JSON unreadable: {e}"
    else:
        result = f"{band.label()}: {res.failure()}"
    share = ", ".join(f"r{k} {b / max(sum(tx), 1):.0%}" for k, b in enumerate(tx))
    rep = f" #{repeat + 1}" if band.repeats > 1 else ""
    rep += f" split {hand_split.format_split(split)}" if split else ""
    log(f"  {spec.name:15s} {band.label() + rep:13s} {res.seconds:6.1f}s  "
        f"{'ok' if run['ok'] else 'FAILED'}  rail tx share: {share}")
    return run, result


def finish_series(spec: SeriesSpec, runs: list[dict], docs_by_band: dict[str, list], failures: list[str]) -> dict:
    """Median over each band's repeats, then the bands merged into one sorted series."""
    out = {"name": spec.name, "label": spec.label, "status": "ok", "reason": "", "runs": runs, "results": []}
    band_docs = []
    for label, docs in docs_by_band.items():
        if not docs:
            continue
        try:
            band_docs.append(median_of_repeats(docs))
        except ValueError as e:
            failures.append(f"{label}: {e}")
    if band_docs:
        try:
            merged = merge_band_docs(band_docs)
            out["results"] = merged.pop("results")
            out["tool_doc"] = merged
        except ValueError as e:
            failures.append(f"merge: {e}")
    if failures:
        out["status"] = "partial" if out["results"] else "failed"
        out["reason"] = "; ".join(failures)
    return out


def finish_hand_split(spec: SeriesSpec, splits: list[tuple[float, ...]], runs: list[dict],
                      docs_by_split: list[dict[str, list]], failures: list[str], proportion_source: str,
                      rails: int) -> dict:
    """Each static split merged like a series of its own, then per size the fastest split."""
    candidates = []
    for split, docs in zip(splits, docs_by_split):
        own_failures: list[str] = []
        merged = finish_series(spec, [], docs, own_failures)
        failures += [f"split {hand_split.format_split(split)}: {f}" for f in own_failures]
        candidates.append({"split": list(split), "status": merged["status"], "results": merged["results"]})
    out = {"name": spec.name, "label": spec.label, "status": "ok", "reason": "", "runs": runs,
           "rails_order": "/".join(f"r{k}" for k in range(rails)), "proportion_source": proportion_source,
           "candidates": candidates,
           "results": hand_split.best_of([(c["split"], c["results"]) for c in candidates])}
    if failures:
        out["status"] = "partial" if out["results"] else "failed"
        out["reason"] = "; ".join(failures)
    return out


def _skipped(spec: SeriesSpec, reason: str) -> dict:
    return {"name": spec.name, "label": spec.label, "status": "skipped", "reason": reason, "runs": [], "results": []}


def run_all_series(ctx: RunContext, scenario: Scenario, specs: list[SeriesSpec],
                   split_rates: tuple[list[float], str] = ([], "")) -> dict[str, dict]:
    """Band by band, repeat by repeat, every series in turn (rotating who goes first), so series
    are measured side by side under the same background load rather than minutes apart.

    split_rates: (per-rail rates, where they come from) that the hand split's static splits are
    centred on; the hand split runs each of its splits back to back in its turn, on its own
    bands (>= 16 MiB)."""
    out: dict[str, dict] = {}
    ready = []
    hs_bands = {b.label(): hb for b in ctx.bands for hb in hand_split.bands_for([b])}
    splits: list[tuple[float, ...]] = []
    for spec in specs:
        if spec.hand_split:
            if not hand_split.applies(scenario):
                out[spec.name] = _skipped(spec, "one rail: nothing to split")
                continue
            if not hs_bands:
                out[spec.name] = _skipped(spec, f"no size >= {hand_split.MIN_BYTES >> 20}M in this run")
                continue
            rates = split_rates[0] or list(scenario.rates_mbit)
            splits = hand_split.candidate_splits(rates, scenario.best_rail())
        reason = missing_tool(ctx, spec)
        if reason:
            out[spec.name] = {"name": spec.name, "label": spec.label, "status": "skipped", "reason": reason,
                              "runs": [], "results": []}
        else:
            ready.append(spec)
    runs = {s.name: [] for s in ready}
    docs = {s.name: {b.label(): [] for b in ctx.bands} for s in ready}
    split_docs = [{hb.label(): [] for hb in hs_bands.values()} for _ in splits]
    failures = {s.name: [] for s in ready}
    turn = 0
    for band in ctx.bands:
        for repeat in range(band.repeats):
            order = ready[turn % len(ready):] + ready[:turn % len(ready)] if ready else []
            turn += 1
            for spec in order:
                if spec.hand_split:
                    hb = hs_bands.get(band.label())
                    if hb is None or repeat >= hb.repeats:
                        continue
                    for i, split in enumerate(splits):
                        run, result = run_launch(ctx, scenario, spec, hb, repeat, split)
                        runs[spec.name].append(run)
                        if isinstance(result, tuple):
                            split_docs[i][hb.label()].append(result)
                        else:
                            failures[spec.name].append(f"split {hand_split.format_split(split)}: {result}")
                    continue
                run, result = run_launch(ctx, scenario, spec, band, repeat)
                runs[spec.name].append(run)
                if isinstance(result, tuple):
                    docs[spec.name][band.label()].append(result)
                else:
                    failures[spec.name].append(str(result))
    for spec in ready:
        if spec.hand_split:
            out[spec.name] = finish_hand_split(spec, splits, runs[spec.name], split_docs, failures[spec.name],
                                               split_rates[1] or "TBF", len(scenario.rates_mbit))
        else:
            out[spec.name] = finish_series(spec, runs[spec.name], docs[spec.name], failures[spec.name])
    return out


def run_scenario(ctx: RunContext, scenario: Scenario, specs: list[SeriesSpec]) -> dict:
    log(f"scenario {scenario.name}: rails {'/'.join(map(str, scenario.rates_mbit))} Mbit/s, "
        f"{ctx.tun.ranks} ranks")
    for k, rate in enumerate(scenario.rates_mbit):
        ctx.bed.shape(k, rate)
    world = ctx.tun.ranks
    sizes = sorted({b for band in ctx.bands for b in band.sizes()})
    scen = {"name": scenario.name, "rates_mbit": list(scenario.rates_mbit), "best_rail": scenario.best_rail(),
            "ranks": world, "sizes": sizes, "series": {}}
    ceiling = ceiling_algbw_gbps(list(scenario.rates_mbit), world)
    scen["ceiling_algbw_gbps"] = ceiling
    scen["series"]["ceiling"] = {"name": "ceiling", "status": "theoretical",
                                 "results": constant_series(sizes, ceiling, world)}
    if ctx.iperf:
        eff = iperf.efficiency(ctx.bed, list(scenario.rates_mbit), ctx.tun.iperf_seconds)
        scen["iperf"] = eff
        ceiling_iperf = ceiling_algbw_gbps([eff["together_sum_mbit"]], world)
        scen["ceiling_iperf_algbw_gbps"] = ceiling_iperf
        scen["series"]["ceiling-iperf"] = {"name": "ceiling-iperf", "status": "measured",
                                           "results": constant_series(sizes, ceiling_iperf, world)}
        log(f"  iperf3: alone {', '.join(f'{m:.0f}' for m in eff['alone_mbit'])} Mbit/s, together "
            f"{eff['together_sum_mbit']:.0f} Mbit/s ({eff['efficiency_together']:.1%} of TBF)")
    # The hand split is centred on what iperf3 measured with all rails busy at once (as they are
    # during a split op); the TBF rates stand in when iperf3 was not run.
    split_rates = (eff["together_mbit"], "iperf3 together") if ctx.iperf else (list(scenario.rates_mbit), "TBF")
    scen["series"].update(run_all_series(ctx, scenario, specs, split_rates))
    rows = {name: s.get("results", []) for name, s in scen["series"].items()}
    scen["ratios"] = compute_ratios(rows, sizes)
    return scen
