#!/usr/bin/env python3
"""Nezha scheduler simulator (make bench-sim): fit the rails to the suite's results, check the
model against the test bed at 2-4 ranks, run it at 16-1,024 ranks, plot, and write a report.

    /usr/bin/python3 -m bench.sim.run_sim [--suite bench/results/latest.json]
        [--nccl bench/results/latest-nccl.json] [--per-message 10e-6] [--out bench/results]

Writes <out>/sim-<UTC>.{md,json} and sim-<UTC>-<plot>.png through the result writer, each
copied to latest-sim*. The model is
analytic (model.py): alpha-beta per rail, best algorithm per rail, cold/hot choice, agreement
schemes, failover as detection + one agreement round + replay. Nothing here runs the runtime.
"""

import argparse
import datetime
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..harness.results import figure_writer, latest_name, write_result  # noqa: E402
from . import params  # noqa: E402
from .model import Rail, Scheduler, hot_split  # noqa: E402

SIZES = [1 << k for k in range(10, 29)]  # 1 KiB .. 256 MiB
RANKS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
SCHEMES = ("all-to-all", "tree", "epoch")
# Detection before failover (runtime/README.md "Failover"): a link event seen by netlink and
# told on the control mesh (~milliseconds), or the progress watchdog for a black hole (400 ms).
DETECTION = {"link event": 0.005, "black hole (watchdog)": 0.4}


def fmt_size(b):
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << k:
            return f"{b >> k}{unit}"
    return str(b)


def scenario_sched(rates, fit, scheme, split_cost):
    return Scheduler(params.rails_for(rates, fit), params.agreement_for(scheme, fit), split_cost)


def fit_split_cost(suite, fit):
    """Per-operation cost of splitting, from the homogeneous adaptive series where it runs hot."""
    diffs = []
    for sc in suite["scenarios"]:
        if "nezha-adaptive" not in sc["series"]:
            continue
        n = sc.get("ranks") or suite["ranks"]
        sched = scenario_sched(sc["rates_mbit"], fit, "all-to-all", 0.0)
        sizes, times = params.series_times(sc, "nezha-adaptive")
        for s, t in zip(sizes, times):
            if 256 << 10 <= s <= 4 << 20:
                diffs.append(t - sched.agreement.per_op(n) - sched.hot(n, s)[0])
    return max(0.0, float(np.median(diffs))) if diffs else 0.0


def validate(suite, nccl, fit, split_cost):
    """Model vs measurement: the suite's adaptive series (its ranks) and the NCCL plugin's ratios."""
    rows = []
    for sc in suite["scenarios"]:
        n = sc.get("ranks") or suite["ranks"]
        sched = scenario_sched(sc["rates_mbit"], fit, "all-to-all", split_cost)
        for series in ("nezha-adaptive", "nezha-single"):
            if series not in sc["series"]:
                continue
            sizes, times = params.series_times(sc, series)
            for s, t in zip(sizes, times):
                pred = sched.op_time(n, s)[0] if series == "nezha-adaptive" else \
                    sched.agreement.per_op(n) + sched.single_rail_time(n, s)
                rows.append({"source": f"suite {sc['name']} {sc['rates_mbit']}", "series": series, "ranks": n,
                             "bytes": s, "measured_s": t, "model_s": pred, "model_over_measured": pred / t})
    ratios = []
    for sc in (nccl or {}).get("scenarios", []):
        if sc.get("mode") != "ring":
            continue
        by = {x["series"]: x for x in sc["series"] if x.get("ok")}
        if "plugin-2rails" not in by or "plugin-1rail" not in by:
            continue
        meas = by["plugin-2rails"]["busbw_gbps"] / by["plugin-1rail"]["busbw_gbps"]
        sched = scenario_sched(sc["rates_mbit"], fit, "all-to-all", split_cost)
        w, s = sc["world"], nccl["bytes"]
        model = sched.single_rail_time(w, s) / sched.op_time(w, s)[0]
        ratios.append({"source": f"nccl {sc['name']}", "ranks": w, "bytes": s, "measured_2rail_over_1rail": meas,
                       "model_2rail_over_1rail": model})
    return rows, ratios


def summarize_validation(rows):
    out = {}
    for key, lo, hi in (("small (<= 64 KiB)", 0, 64 << 10), ("medium (128 KiB - 1 MiB)", 128 << 10, 1 << 20),
                        ("large (>= 2 MiB)", 2 << 20, 1 << 40)):
        errs = [abs(r["model_over_measured"] - 1) for r in rows if lo <= r["bytes"] <= hi and r["series"] == "nezha-adaptive"]
        if errs:
            out[key] = {"median_abs_error": float(np.median(errs)), "max_abs_error": float(np.max(errs)), "points": len(errs)}
    return out


def sweep(fit, split_cost):
    res = {"threshold": {}, "gain": {}, "agreement_per_op": {}, "small_op_over_single": {}, "failover": {}}
    for label, rates in (("homogeneous 500/500", [500, 500]), ("heterogeneous 800/300", [800, 300])):
        for scheme in SCHEMES:
            sched = scenario_sched(rates, fit, scheme, split_cost)
            res["threshold"][f"{label}, {scheme}"] = {n: sched.threshold(n, SIZES) for n in RANKS}
            for n in (4, 8, 64, 1024):
                res["gain"][f"{label}, {scheme}, N={n}"] = [sched.single_rail_time(n, s) / sched.op_time(n, s)[0] for s in SIZES]
    base = scenario_sched([500, 500], fit, "all-to-all", split_cost)
    for scheme in SCHEMES:
        ag = params.agreement_for(scheme, fit)
        res["agreement_per_op"][scheme] = {n: ag.per_op(n) for n in RANKS}
        sched = scenario_sched([500, 500], fit, scheme, split_cost)
        res["small_op_over_single"][scheme] = {n: sched.op_time(n, 1024)[0] / sched.single_rail_time(n, 1024) for n in RANKS}
        for det_name, det in DETECTION.items():
            res["failover"][f"{scheme}, {det_name}"] = {
                n: sched.failover_stall(n, 64 << 20, failed=1, detection=det) for n in (16, 128, 1024)}
    res["failover_parts_1024"] = {
        scheme: {"agreement_round_s": params.agreement_for(scheme, fit).per_op(1024, changed=True),
                 "replay_64MiB_s": base.failover_stall(1024, 64 << 20, failed=1, detection=0.0)
                 - params.agreement_for("all-to-all", fit).per_op(1024, changed=True)}
        for scheme in SCHEMES}
    # Heterogeneous split learned at each N for a 64 MiB operation (Fig. 11's quantity).
    het = scenario_sched([800, 300], fit, "epoch", split_cost)
    res["split_share_slow_rail"] = {n: hot_split(het.rails, n, 1 << 20)[0][1] for n in RANKS}
    # What if one rail had a tenth of the latency (an RDMA/SHARP-like rail; assumed, not measured):
    # its share of the split then depends on size and N, as in the paper's Fig. 11.
    tcp = params.rails_for([800], fit)[0]
    low = Rail("low-latency", tcp.alpha / 10, tcp.beta)
    res["split_share_low_latency_rail"] = {fmt_size(s): {n: hot_split((tcp, low), n, s)[0][1] for n in RANKS}
                                           for s in (256 << 10, 1 << 20, 16 << 20)}
    return res


def trend_checks(res):
    checks = []
    for key, th in res["threshold"].items():
        if "epoch" not in key:
            continue
        vals = [th[n] for n in RANKS if th[n] is not None]
        falls = all(b <= a for a, b in zip(vals, vals[1:])) and vals[-1] < vals[0]
        checks.append((f"cold/hot threshold falls as N grows ({key})", falls,
                       ", ".join(f"N={n} {fmt_size(th[n]) if th[n] else '-'}" for n in RANKS)))
    for label, best_rate, total in (("homogeneous 500/500", 500, 1000), ("heterogeneous 800/300", 800, 1100)):
        g = res["gain"][f"{label}, epoch, N=8"]
        small = g[0]
        large = g[-1]
        ok = small <= 1.02 and large >= 0.9 * total / best_rate
        checks.append((f"gain vs one rail: ~1 when small, ~sum/best when large ({label}, N=8)", ok,
                       f"1 KiB {small:.2f}x, 256 MiB {large:.2f}x (sum/best {total / best_rate:.2f}x)"))
    return checks


def plot(res, fit, split_cost, rows):
    """The report's figures by name; main writes them through the result writer."""
    figs = {}

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, th in res["threshold"].items():
        if "all-to-all" in key:
            continue
        xs = [n for n in RANKS if th[n]]
        ax.plot(xs, [th[n] for n in xs], marker="o", label=key)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("cold/hot threshold (bytes)")
    ax.set_title("Cold/hot threshold vs N (model; Nezha v2 Fig. 9 trend)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    figs["threshold"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, label in zip(axes, ("homogeneous 500/500", "heterogeneous 800/300")):
        for n in (4, 8, 64, 1024):
            for scheme, style in (("epoch", "-"), ("all-to-all", ":")):
                ax.plot(SIZES, res["gain"][f"{label}, {scheme}, N={n}"], style, label=f"N={n}, {scheme}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("allreduce size (bytes)")
        ax.set_title(label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("Nezha / best single rail (speed-up)")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle("Gain vs one rail across sizes (model)")
    figs["gain"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for scheme in SCHEMES:
        axes[0].plot(RANKS, [res["agreement_per_op"][scheme][n] * 1e3 for n in RANKS], marker="o", label=scheme)
        axes[1].plot(RANKS, [res["small_op_over_single"][scheme][n] for n in RANKS], marker="o", label=scheme)
    axes[0].set_ylabel("agreement per operation (ms)")
    axes[1].set_ylabel("1 KiB allreduce: Nezha / best single rail (time)")
    axes[1].axhline(1.05, color="red", lw=0.8, ls="--", label="target 1.05x")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    fig.suptitle("Per-operation rail agreement vs N (model)")
    figs["agreement"] = fig

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for source in sorted({r["source"] for r in rows}):
        for series, marker in (("nezha-adaptive", "o"), ("nezha-single", "x")):
            pts = [r for r in rows if r["source"] == source and r["series"] == series]
            if pts:
                ax.plot([r["bytes"] for r in pts], [r["model_over_measured"] for r in pts], marker=marker, ls="-",
                        label=f"{source} {series}")
    ax.axhline(1.0, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("allreduce size (bytes)")
    ax.set_ylabel("model time / measured time")
    ax.set_title(f"Validation against the test bed ({' and '.join(map(str, fit.get('ranks_fitted', [fit['ranks']])))} ranks)")
    ax.legend(fontsize=6)
    ax.grid(True, alpha=0.3)
    figs["validation"] = fig
    return figs


def report(fit, split_cost, vsum, ratios, res, checks, files, suite_path):
    lines = ["## Simulator (bench/sim, `make bench-sim`)", ""]
    lines.append(f"Analytic alpha-beta model of the scheduler (bench/sim/model.py). Rails fitted to `{suite_path}` "
                 f"({fit['source']}; its nezha-single series): alpha {fit['alpha'] * 1e6:.1f} us per step, "
                 f"efficiency {fit['efficiency']:.3f} of the TBF rate, control message cost {fit['per_message'] * 1e6:.0f} us "
                 f"(assumed), split cost {split_cost * 1e6:.0f} us per hot operation (fitted). Not measured by a "
                 "separate probe: the suite's own series are the measurement.")
    lines += ["", "Validation, model time / measured time, Nezha adaptive:", ""]
    lines += ["| sizes | median error | max error | points |", "|---|---|---|---|"]
    for k, v in vsum.items():
        lines.append(f"| {k} | {v['median_abs_error'] * 100:.0f} % | {v['max_abs_error'] * 100:.0f} % | {v['points']} |")
    if ratios:
        lines += ["", "| NCCL plugin run | ranks | 2 rails / 1 rail measured | model |", "|---|---|---|---|"]
        for r in ratios:
            lines.append(f"| {r['source']} | {r['ranks']} | {r['measured_2rail_over_1rail']:.2f}x | {r['model_2rail_over_1rail']:.2f}x |")
    lines += ["", "Ranks the model was checked at: " + ", ".join(sorted({str(r["ranks"]) for r in ratios} | {str(k) for k in fit.get("ranks_fitted", [fit["ranks"]])})) +
              " (the 2-8-rank test-bed sweep checks the discrete-event simulator).", ""]
    lines += ["Paper trends (Nezha v2 Fig. 9/11):", ""]
    for name, ok, detail in checks:
        lines.append(f"- {'PASS' if ok else 'MISS'} {name}: {detail}")
    sh = res["split_share_slow_rail"]
    lines.append("- split on the test bed's rails (800 + 300 Mbit/s, same latency), share of the 300 rail at 1 MiB: " +
                 ", ".join(f"N={n} {sh[n] * 100:.1f} %" for n in (2, 8, 1024)) +
                 " — bandwidth-proportional at every N: rails with equal latency split by bandwidth alone")
    for size, sh in res["split_share_low_latency_rail"].items():
        lines.append(f"- what-if, two 800 Mbit/s rails, one with a tenth of the latency (assumed): its share at {size}: " +
                     ", ".join(f"N={n} {sh[n] * 100:.1f} %" for n in (2, 4, 8, 64, 1024)) +
                     " (Fig. 11's trend: the split depends on size and N)")
    lines += ["", "Per-operation agreement and failover at scale (500/500 rails):", ""]
    lines += ["| agreement | per op N=16 | N=128 | N=1024 | 1 KiB op / one rail, N=1024 |", "|---|---|---|---|---|"]
    for scheme in SCHEMES:
        a = res["agreement_per_op"][scheme]
        lines.append(f"| {scheme} | {a[16] * 1e3:.2f} ms | {a[128] * 1e3:.2f} ms | {a[1024] * 1e3:.2f} ms | "
                     f"{res['small_op_over_single'][scheme][1024]:.2f}x |")
    lines += ["", "| failover of a 64 MiB operation at 1,024 ranks | agreement round | whole stall |", "|---|---|---|"]
    for key, v in res["failover"].items():
        scheme = key.split(",")[0]
        lines.append(f"| {key} | {res['failover_parts_1024'][scheme]['agreement_round_s'] * 1e3:.2f} ms | {v[1024] * 1e3:.0f} ms |")
    lines += ["", "The runtime's agreement was the all-to-all round in older builds (one control message to every "
              "peer per operation): O(N) per rank, tens of milliseconds per operation at 1,024 ranks. It is now a "
              "dissemination round (ceil(log2 N) messages per rank, the `tree` row's cost in this model; the "
              "discrete-event simulator below prices it exactly); a rail-set epoch in the slice headers costs nothing "
              "while the set holds and one tree round when it changes.", ""]
    lines += [f"![threshold]({files['threshold']}) ![gain]({files['gain']})",
              f"![agreement]({files['agreement']}) ![validation]({files['validation']})", ""]
    return "\n".join(lines)


README_BEGIN = "<!-- bench-sim:begin (generated by bench/sim/run_sim.py; do not edit) -->"
README_END = "<!-- bench-sim:end -->"


def update_readme(path, md, results_rel):
    """Replace the generated block of the README with this run's report (plots linked there)."""
    with open(path) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{path}: no {README_BEGIN} ... {README_END} block to rewrite")
    body = md.split("\n", 2)[2]  # drop the report's own heading; the README has one
    body = body.replace("](latest-sim-", f"]({results_rel}/latest-sim-")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    with open(path, "w") as f:
        f.write(head + README_BEGIN + "\n" + body.strip() + "\n" + README_END + tail)


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=os.path.join(here, "results", "latest.json"))
    ap.add_argument("--nccl", default=os.path.join(here, "results", "latest-nccl.json"))
    ap.add_argument("--per-message", type=float, default=params.DEFAULT_PER_MESSAGE,
                    help="seconds of CPU per control message (default %(default)s, assumed)")
    ap.add_argument("--out", default=os.path.join(here, "results"))
    ap.add_argument("--readme", default=os.path.join(here, "README.md"),
                    help="rewrite the block between README_BEGIN/README_END markers here ('' to skip)")
    args = ap.parse_args(argv)
    if args.per_message < 0:
        ap.error(f"--per-message must not be negative, got {args.per_message}")

    suite = params.load(args.suite)
    nccl = params.load(args.nccl) if os.path.exists(args.nccl) else None
    fit = params.fit_suite(suite, args.per_message)
    split_cost = fit_split_cost(suite, fit)
    rows, ratios = validate(suite, nccl, fit, split_cost)
    vsum = summarize_validation(rows)
    res = sweep(fit, split_cost)
    checks = trend_checks(res)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    figs = plot(res, fit, split_cost, rows)
    # The report links the latest-* copies of the plots: those are the ones committed.
    files = {name: latest_name("sim", f"-{name}.png") for name in figs}
    md = report(fit, split_cost, vsum, ratios, res, checks, files, os.path.relpath(args.suite, os.path.dirname(here)))
    data = {"fit": fit, "split_cost_s": split_cost, "validation": vsum, "validation_points": rows, "nccl_ratios": ratios,
            "results": {k: ({str(kk): vv for kk, vv in v.items()} if isinstance(v, dict) else v) for k, v in res.items()},
            "checks": [{"check": c, "pass": ok, "detail": d} for c, ok, d in checks], "plots": files}
    write_result(args.out, "sim", stamp, {".md": md, ".json": json.loads(json.dumps(data, default=str)),
                                          **{f"-{name}.png": figure_writer(fig) for name, fig in figs.items()}})
    if args.readme:
        update_readme(args.readme, md, os.path.relpath(args.out, os.path.dirname(args.readme)))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
