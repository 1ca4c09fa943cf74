#!/usr/bin/python3
"""The demo's throughput story (hack/demo.sh): from rank 0's sampled runtime metrics
(demo-sample.py) and the demo's timeline (markers.json), print throughput per rail before, during
and after the rail cut, and write a PNG plot.

    demo-story.py --samples samples.jsonl --markers markers.json --png out.png

Exit codes: 0 ok, 1 too few samples, 3 the cut rail was never re-admitted (story still printed).

Throughput is allreduce data per second (nezha_runtime_rail_bytes_total: the operation bytes each
rail carried), in Mbit/s; with 2 ranks each rail's link carries about that much each way."""

import argparse
import json
import sys

# Seconds left out at the start of each phase: the runtime re-plans its split after a change
# (shaping applied, a rail lost) within a few operations; the table shows the steady state.
SETTLE_SECONDS = 2.0
# The plot's smoothing: 4 sampling intervals (2 s).
SMOOTH_SAMPLES = 4


def load_samples(path):
    samples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                samples.append(json.loads(line))
    samples.sort(key=lambda s: s["t"])
    return samples


def window_rates(samples, rails, start, end):
    """Mean Mbit/s per rail (and collectives/s) between the first and last sample in [start, end]."""
    inside = [s for s in samples if start <= s["t"] <= end]
    if len(inside) < 2 or inside[-1]["t"] - inside[0]["t"] < 1.0:
        return None
    a, b = inside[0], inside[-1]
    dt = b["t"] - a["t"]
    rates = {r: (b["bytes"].get(r, 0) - a["bytes"].get(r, 0)) * 8 / dt / 1e6 for r in rails}
    rates["total"] = sum(rates[r] for r in rails)
    rates["steps"] = (b["ops"] - a["ops"]) / dt
    rates["seconds"] = dt
    return rates


def readmitted_at(samples, m):
    """When rank 0's runtime first reported the cut rail healthy after the link came back."""
    for s in samples:
        if s["t"] >= m["restore"] and s.get("state", {}).get(m["cut_rail"]) == "healthy":
            return s["t"]
    return None


def series(samples, rails, t0):
    """Mbit/s per rail over sliding windows of SMOOTH_SAMPLES intervals (a 4 MiB step takes
    ~0.1 s, so one 0.5 s interval holds a varying whole number of steps), at each window's
    midpoint (seconds since t0)."""
    ts, per_rail = [], {r: [] for r in rails}
    for a, b in zip(samples, samples[SMOOTH_SAMPLES:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        ts.append((a["t"] + b["t"]) / 2 - t0)
        for r in rails:
            per_rail[r].append(max(0.0, (b["bytes"].get(r, 0) - a["bytes"].get(r, 0)) * 8 / dt / 1e6))
    return ts, per_rail


def plot(samples, m, healthy, path):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    rails, t0 = m["rails"], m["train"]
    ts, per_rail = series(samples, rails, t0)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.stackplot(ts, *[per_rail[r] for r in rails], labels=rails, alpha=0.85, step="mid")
    ax.axvspan(m["cut"] - t0, m["restore"] - t0, color="red", alpha=0.10,
               label=f"{m['cut_rail']} cut ({m['cut_link']} down)")
    if healthy is not None:
        ax.axvline(healthy - t0, color="green", linestyle="--", linewidth=1,
                   label=f"{m['cut_rail']} re-admitted by the runtime")
    ax.axvline(m["job_healthy"] - t0, color="purple", linestyle=":", linewidth=1,
               label="job Running/RailsHealthy again (operator)")
    if m.get("rate_mbit"):
        ax.axhline(m["rate_mbit"] * len(rails), color="grey", linestyle=":", linewidth=1,
                   label=f"sum of rail speeds ({m['rate_mbit']} Mbit/s each)")
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel("allreduce throughput (Mbit/s)")
    ax.set_title(f"Nezha demo: a MultiRailJob on 2 rails, {m['cut_rail']} cut on node {m['node']}")
    ax.set_xlim(0, max(ts) if ts else 1)
    ax.set_ylim(0, max([m.get("rate_mbit", 0) * len(rails)] + [sum(v) for v in zip(*per_rail.values())]) * 1.15 or 1)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True)
    p.add_argument("--markers", required=True)
    p.add_argument("--png", required=True)
    a = p.parse_args(argv)
    samples = load_samples(a.samples)
    with open(a.markers, encoding="utf-8") as f:
        m = json.load(f)
    rails, cut = m["rails"], m["cut_rail"]
    if len(samples) < 4:
        print(f"demo-story: only {len(samples)} metrics samples in {a.samples}: no throughput story",
              file=sys.stderr)
        return 1
    healthy = readmitted_at(samples, m)
    phases = [
        ("before (both rails)", m["train"] + SETTLE_SECONDS, m["cut"]),
        (f"during ({cut} cut)", m["cut"] + SETTLE_SECONDS, m["restore"]),
        (f"after ({cut} back)" if healthy is not None else "after (link back)",
         (healthy if healthy is not None else m["restore"]) + SETTLE_SECONDS, m["end"]),
    ]
    shaped = f"each rail shaped to {m['rate_mbit']} Mbit/s" if m.get("rate_mbit") else "rails unshaped"
    print(f"Throughput from rank 0's runtime metrics (allreduce data, Mbit/s; {shaped}):")
    header = f"  {'phase':<26}{'window':>8}" + "".join(f"{r:>12}" for r in rails) + f"{'total':>10}{'ops/s':>9}"
    print(header)
    results = {}
    for name, start, end in phases:
        r = window_rates(samples, rails, start, end)
        results[name] = r
        if r is None:
            print(f"  {name:<26}{'(too short)':>8}")
            continue
        print(f"  {name:<26}{r['seconds']:>7.1f}s" + "".join(f"{r[x]:>12.0f}" for x in rails)
              + f"{r['total']:>10.0f}{r['steps']:>9.1f}")
    t0 = m["train"]
    print()
    readmitted = (f"re-admitted by the runtime at {healthy - t0:.1f} "
                  f"({healthy - m['restore']:.1f}s after the link came back)" if healthy is not None
                  else "NOT re-admitted by the runtime")
    print(f"Timeline (seconds since training started): {cut} cut at {m['cut'] - t0:.1f} "
          f"({m['cut_link']} down on {m['node']}), link back at {m['restore'] - t0:.1f}, "
          f"{readmitted}, job marked healthy by the operator at {m['job_healthy'] - t0:.1f} "
          f"({m['job_healthy'] - m['restore']:.1f}s after), job ended at {m['end'] - t0:.1f}: "
          f"{m['phase']}.")
    rejected = samples[-1].get("rejected", {}).get(cut, {})
    if rejected:
        print(f"Re-admission attempts of {cut} the runtime rejected: "
              + ", ".join(f"{n:.0f} ({reason})" for reason, n in sorted(rejected.items())) + ".")
    if m["phase"] == "Succeeded":
        print("Succeeded: both workers' train_cnn.py exited 0; demo.sh then checks that both ranks "
              "ended at the same step with the same loss and bit-identical parameters.")
    plot(samples, m, healthy, a.png)
    print(f"Plot: {a.png}")
    return 0 if healthy is not None else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
