#!/usr/bin/python3
"""Plot a split-curve result (bench/run_split_curve.py, target D): one column per
scenario; top, the adaptive policy's op time per op (each repeat faint, its rolling median solid)
against the best static split's time and the 5 % band; middle, the learned split per op against
the best static split; bottom, the static sweep.

    /usr/bin/python3 -m bench.plot_split_curve bench/results/issue18-perf/split-curve-<stamp>.json [-o out.png]
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from .harness import split_curve as sc  # noqa: E402

REPEAT_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
RAIL_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e")


def _label(split) -> str:
    return "/".join(f"{x:.2f}" for x in split)


def _curve(ax, s: dict, goal: int) -> None:
    best = s["best"]["median_s"] * 1e3
    ax.axhspan(0, best * (1 + sc.TOLERANCE), color="#2ca02c", alpha=0.08)
    ax.axhline(best, color="black", linestyle="--", linewidth=1.2,
               label=f"best static {_label(s['best']['split'])}: {best:.0f} ms")
    ax.axhline(best * (1 + sc.TOLERANCE), color="gray", linestyle=":", linewidth=1.2, label="+5 %")
    ax.axvline(goal, color="black", linewidth=0.8, alpha=0.5)
    top = best * 1.6
    for i, cv in enumerate(s["curves"]):
        j = cv.get("judged")
        if not j:
            continue
        color = REPEAT_COLORS[i % len(REPEAT_COLORS)]
        ts = [t * 1e3 for t in cv["times_s"][:j["ops"]]]
        xs = list(range(1, len(ts) + 1))
        rm = sc.rolling_median(ts)
        ax.plot(xs, ts, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(xs, [x if x is not None else float("nan") for x in rm], color=color, linewidth=1.8,
                label=f"repeat {i + 1}: settled at op {j['settle_op'] or 'never'}")
        if j["settle_op"]:
            ax.plot([j["settle_op"]], [rm[j["settle_op"] - 1]], marker="o", color=color, markersize=6)
        top = max(top, max(ts[: min(len(ts), 10)], default=top) * 1.05)
    for i, cv in enumerate(s.get("controls", [])):
        ts = [t * 1e3 for t in cv["times_s"][:cv["judged"]["ops"]]]
        rm = sc.rolling_median(ts)
        ax.plot(range(1, len(ts) + 1), [x if x is not None else float("nan") for x in rm], color="gray",
                linewidth=1.0, linestyle="--", label="control: best static pinned, same length" if i == 0 else None)
    ax.set_ylim(0, top)
    ax.set_xlim(0, max((c.get("judged", {}).get("ops", 0) for c in s["curves"]), default=goal) + 1)
    ax.set_xlabel(f"operation (fresh start; solid: rolling median of {sc.WINDOW})")
    ax.set_ylabel("op time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right")


def _splits(ax, s: dict, goal: int) -> None:
    nrails = len(s["rates_mbit"])
    for k in range(nrails):
        color = RAIL_COLORS[k % len(RAIL_COLORS)]
        ax.axhline(s["best"]["split"][k], color=color, linestyle="--", linewidth=1.0)
        for i, cv in enumerate(s["curves"]):
            j = cv.get("judged")
            if not j:
                continue
            ys = [sp[k] for sp in cv["splits"][:j["ops"]]]
            ax.plot(range(1, len(ys) + 1), ys, color=color, alpha=0.8, linewidth=1.0,
                    linestyle=("-", "-.", ":", (0, (5, 1)))[i % 4],
                    label=f"r{k} ({s['rates_mbit'][k]} Mbit/s)" if i == 0 else None)
    ax.axvline(goal, color="black", linewidth=0.8, alpha=0.5)
    ax.set_ylim(0, 1)
    ax.set_xlabel("operation (dashed: best static split; one line style per repeat)")
    ax.set_ylabel("rail's share of the op")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="center right")


def _sweep(ax, s: dict) -> None:
    rows = [st for st in s["static"] if st["median_s"]]
    xs = range(len(rows))
    best = s["best"]["split"]
    ax.bar(xs, [st["median_s"] * 1e3 for st in rows],
           color=["#ff7f0e" if st["split"] == best else "#c7c7c7" for st in rows])
    ax.set_xticks(list(xs))
    ax.set_xticklabels([_label(st["split"]) for st in rows], rotation=30, fontsize=7.5)
    ax.axhline(s["best"]["median_s"] * 1e3 * (1 + sc.TOLERANCE), color="gray", linestyle=":", linewidth=1.2)
    lo = min(st["median_s"] for st in rows) * 1e3
    ax.set_ylim(lo * 0.8, max(st["median_s"] for st in rows) * 1e3 * 1.05)
    ax.set_xlabel("static split (pinned), " + "/".join(f"r{k}" for k in range(len(s["rates_mbit"]))))
    ax.set_ylabel("median op time (ms)")
    ax.grid(True, axis="y", alpha=0.3)


def plot(doc: dict, path: str) -> None:
    scens = [s for s in doc["scenarios"] if s.get("best") and s.get("curves")]
    if not scens:
        return
    goal = doc["args"]["goal_ops"]
    fig, axes = plt.subplots(3, len(scens), figsize=(7.5 * len(scens), 12), squeeze=False)
    for col, s in enumerate(scens):
        _curve(axes[0][col], s, goal)
        axes[0][col].set_title(f"{s['name']}: {s['ranks']} ranks, rails {'/'.join(map(str, s['rates_mbit']))} "
                               f"Mbit/s, {doc['args']['bytes'] >> 20} MiB allreduce — {s['verdict']}")
        _splits(axes[1][col], s, goal)
        _sweep(axes[2][col], s)
    hw = doc["hardware"]
    fig.suptitle(f"Learned split vs best static split — {hw['cpu_model']}, {hw['cores']} cores, "
                 f"load {hw['loadavg_start'][0]:.2f} ({doc['started']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    plot(doc, a.out or os.path.splitext(a.json)[0] + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
