#!/usr/bin/python3
"""Plot a benchmark result: algbw vs message size (log-log), one panel per scenario, one line per
series, ceilings dashed.

    /usr/bin/python3 -m bench.plot bench/results/latest.json [-o out.png]
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

from .harness.series import LABELS, SERIES_ORDER  # noqa: E402
from .harness.sizes import format_bytes  # noqa: E402

STYLE = {
    "nezha-adaptive": dict(color="#d62728", marker="o", linewidth=2.4, zorder=5),
    "nezha-static": dict(color="#ff7f0e", marker="s"),
    "nezha-single": dict(color="#9467bd", marker="^"),
    "gloo-best-rail": dict(color="#1f77b4", marker="v"),
    "gloo-mptcp": dict(color="#2ca02c", marker="D"),
    "gloo-hand-split": dict(color="#17becf", marker="P"),
    "ceiling": dict(color="black", linestyle="--", linewidth=1.2),
    "ceiling-iperf": dict(color="gray", linestyle=":", linewidth=1.4),
}


# The lower panels zoom into the bandwidth-bound sizes on a linear axis, where the ratios that
# matter (vs one rail, vs the ceiling) are visible; the upper ones show the whole range log-log.
ZOOM_MIN_BYTES = 1 << 20


def _draw(ax, doc: dict, scen: dict, min_bytes: int, legend: bool) -> None:
    for name in SERIES_ORDER:
        s = scen["series"].get(name)
        if not s:
            continue
        rows = [r for r in s.get("results", [])
                if r.get("check") != "failed" and r.get("algbw_gbps") and r["bytes"] >= min_bytes]
        label = LABELS.get(name, name)
        if not rows:
            # Keep the legend honest about what did not run.
            ax.plot([], [], label=f"{label} — {s.get('status', 'no data')}", color="lightgray")
            continue
        ax.plot([r["bytes"] for r in rows], [r["algbw_gbps"] * 8 for r in rows], label=label,
                markersize=4, **STYLE.get(name, {}))
    sizes = [b for b in scen["sizes"] if b >= min_bytes]
    ax.set_xscale("log", base=2)
    ticks = sizes[:: max(1, (len(sizes) + 9) // 10)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([format_bytes(b) for b in ticks])
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("algbw (Gbit/s)")
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=7.5, loc="lower right")


def plot(doc: dict, path: str) -> None:
    scenarios = doc["scenarios"]
    zoom = any(b >= ZOOM_MIN_BYTES for scen in scenarios for b in scen["sizes"])
    nrows = 2 if zoom else 1
    fig, axes = plt.subplots(nrows, len(scenarios), figsize=(7.5 * len(scenarios), 5.2 * nrows), squeeze=False)
    for col, scen in enumerate(scenarios):
        rates = "/".join(map(str, scen["rates_mbit"]))
        top = axes[0][col]
        _draw(top, doc, scen, 0, legend=True)
        top.set_yscale("log")
        top.set_title(f"{scen['name']}: rails {rates} Mbit/s, {doc['ranks']}-rank allreduce")
        if zoom:
            bottom = axes[1][col]
            _draw(bottom, doc, scen, ZOOM_MIN_BYTES, legend=False)
            bottom.set_ylim(bottom=0)
            bottom.set_title(f"{scen['name']}: sizes >= {format_bytes(ZOOM_MIN_BYTES)}, linear scale")
    hw = doc["hardware"]
    fig.suptitle(f"Nezha vs baselines — {hw['cpu_model']}, {hw['cores']} cores, {hw['setup']} "
                 f"({doc['mode']} run, {doc['started']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


CHAOS_STYLE = {
    "nezha-adaptive": dict(color="#d62728", marker="o"),
    "gloo-cut-rail": dict(color="#1f77b4", marker="v"),
    "gloo-best-rail": dict(color="#9467bd", marker="^"),
    "gloo-mptcp": dict(color="#2ca02c", marker="D"),
}


def plot_chaos(doc: dict, path: str) -> None:
    """Per-op algbw over time in the chaos run; the cut window shaded, failures marked."""
    chaos = doc["chaos"]
    tl = chaos["timeline"]
    fig, ax = plt.subplots(figsize=(11, 5.2))
    ax.axvspan(tl["cut_at"], tl["restore_at"], color="orange", alpha=0.12,
               label=f"r{chaos['cut_rail']} of host {chaos['cut_host']} cut")
    for name, s in chaos["series"].items():
        style = CHAOS_STYLE.get(name, {})
        m = s.get("metrics") or {}
        if "trace" not in s and m.get("mode") == "sweep-fallback" and "t0_unix" in s:
            # No per-op trace: mark only the outcome (failure time, or survival) on the time axis.
            label = f"{s['label']} — no per-op trace, " + ("failed" if m["failed"] else "survived")
            if m["failed"] and m.get("failed_after_cut_s") is not None:
                x = tl["cut_at"] + m["failed_after_cut_s"]
                ax.plot([x], [0], marker="X", markersize=12, color=style.get("color", "k"), linestyle="none",
                        label=label)
            else:
                ax.plot([], [], color=style.get("color", "k"), label=label)
            continue
        if "trace" not in s:
            ax.plot([], [], color="lightgray", label=f"{s['label']} — {s['status']}")
            continue
        t0, tr = s["t0_unix"], s["trace"]
        xs = [end - t0 for end, _ in tr["ops"]]
        ys = [tr["bytes"] / (us / 1e6) * 8 / 1e9 for _, us in tr["ops"]]  # per-op algbw, Gbit/s
        ax.plot(xs, ys, label=s["label"], markersize=3, linewidth=1.2, **style)
        if tr.get("error"):
            x = tr["error"]["t_unix"] - t0
            ax.plot([x], [0], marker="X", markersize=12, color=style.get("color", "k"), linestyle="none")
            ax.annotate("job failed", (x, 0), textcoords="offset points", xytext=(4, 8), fontsize=8,
                        color=style.get("color", "k"))
    ax.set_xlim(0, tl["loop_seconds"] + 2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the ranks started")
    ax.set_ylabel("per-op algbw (Gbit/s)")
    ax.set_title(f"chaos: {doc['ranks']}-rank allreduce of {format_bytes(tl['bytes'])} on rails "
                 f"{'/'.join(map(str, chaos['rates_mbit']))} Mbit/s; slow rail cut on one rank, then restored")
    ax.grid(True, alpha=0.3)
    # Below the axes: the traces fill the whole plot area.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)
    hw = doc["hardware"]
    fig.suptitle(f"{hw['cpu_model']}, {hw['cores']} cores, {hw['setup']} ({doc['started']})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="result JSON written by run_bench.py")
    ap.add_argument("-o", "--output", help="PNG path (default: next to the JSON)")
    a = ap.parse_args()
    try:
        with open(a.results) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot.py: {a.results}: {e}", file=sys.stderr)
        return 2
    out = a.output or os.path.splitext(a.results)[0] + ".png"
    (plot_chaos if "chaos" in doc else plot)(doc, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
