"""PNG plots of a simulator run (matplotlib, Agg)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .sweep import FAILOVER_RANKS, GAIN_RANKS, GAIN_SIZES, RANKS  # noqa: E402


def plot_all(res, rows):
    """The report's figures by name; run_des writes them through the result writer."""
    figs = {}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, th in res["threshold"].items():
        xs = [n for n in RANKS if th[n]["simulated"]]
        ax.plot(xs, [th[n]["simulated"] for n in xs], marker="o", label=key)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("cold/hot threshold (bytes)")
    ax.set_title("Simulated cold/hot threshold vs N (Nezha v2 Fig. 9 quantity)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    figs["threshold"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, label in zip(axes, ("homogeneous 500/500", "heterogeneous 800/300")):
        for n in GAIN_RANKS:
            for algo, style in (("runtime", "-"), ("best", ":")):
                key = f"{label}, {algo} algorithms, N={n}"
                ax.plot(GAIN_SIZES, res["gain"][key], style, marker=".", label=f"N={n}, {algo}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("allreduce size (bytes)")
        ax.set_title(label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("best single rail time / Nezha time")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle("Simulated gain vs one rail across sizes")
    figs["gain"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for scheme in ("all-to-all", "tree", "dissemination", "epoch"):
        axes[0].plot(RANKS, [res["agreement_per_op"][n][scheme] * 1e3 for n in RANKS], marker="o", label=scheme)
        axes[1].plot(RANKS, [res["small_op_over_no_round"][n][scheme] for n in RANKS], marker="o", label=scheme)
    axes[1].plot(RANKS, [res["small_op_over_no_round"][n]["all-to-all, round-free"] for n in RANKS], marker="x",
                 ls="--", label="all-to-all, round-free ops (earlier runtime)")
    axes[1].plot(RANKS, [res["small_op_over_no_round"][n]["dissemination, round-free"] for n in RANKS], marker="x",
                 ls=":", label="dissemination, round-free ops (runtime)")
    axes[0].set_ylabel("agreement round per operation (ms)")
    axes[0].set_yscale("symlog", linthresh=0.01)
    axes[1].set_ylabel("1 KiB allreduce / the same without a round")
    axes[1].axhline(1.05, color="red", lw=0.8, ls="--", label="target: 1.05x")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Per-operation rail agreement vs N (simulated)")
    figs["agreement"] = fig

    fig, ax = plt.subplots(figsize=(9, 4.2))
    phases = (("detect/attempt", lambda r: r["attempt_end_s"] - r["fail_at_s"]),
              ("agreement round", lambda r: r["agree_round_s"]), ("retire round", lambda r: r["retire_round_s"]),
              ("replay", lambda r: r["replay_s"]), ("replay's round", lambda r: r["replay_round_s"]))
    keys = [k for k in res["failover"] if "all-to-all" in k or "N=1024" in k]
    bottom = [0.0] * len(keys)
    for name, fn in phases:
        vals = [fn(res["failover"][k]) * 1e3 for k in keys]
        ax.barh(range(len(keys)), vals, left=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(keys, fontsize=7)
    ax.set_xlabel("ms after the rail failed (64 MiB operation, 500/500 rails)")
    ax.set_title(f"Failover at {', '.join(map(str, FAILOVER_RANKS))} ranks: where the time goes")
    ax.legend(fontsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    figs["failover"] = fig

    plot_control(res, figs)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key in sorted({(r["source"], r["ranks"], r["series"]) for r in rows}):
        pts = [r for r in rows if (r["source"], r["ranks"], r["series"]) == key]
        ax.plot([r["bytes"] for r in pts], [r["sim_over_measured"] for r in pts],
                marker="o" if key[2] == "nezha-adaptive" else "x", ls="-" if key[2] == "nezha-adaptive" else ":",
                label=f"{key[0]} N={key[1]} {key[2]}")
    ax.axhline(1.0, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("allreduce size (bytes)")
    ax.set_ylabel("simulated / measured time")
    ax.set_title("Validation against the test bed")
    ax.legend(fontsize=6)
    ax.grid(True, alpha=0.3)
    figs["validation"] = fig
    return figs


def plot_control(res, figs):
    """Control traffic per rank vs N (bench/README.md, "Discrete-event simulator"): the agreement
    round's messages, heartbeat messages per second, and when every peer knows a cut host is gone."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    tr = res["agreement_traffic"]
    ns = sorted(tr)
    for scheme, style in (("all-to-all", "-"), ("tree", ":"), ("dissemination", "--")):
        axes[0].plot(ns, [tr[n][scheme]["messages"] for n in ns], style, marker="o",
                     label=scheme + {"dissemination": " (runtime)", "all-to-all": " (earlier runtime)"}.get(scheme, " (what-if)"))
    axes[0].set_ylabel("messages per rank per operation")
    axes[0].set_title("Agreement round")
    hb = res["heartbeats"]
    hn = sorted(hb)
    for scheme, label in (("all-to-all", "all-to-all (earlier runtime)"), ("neighbours", "log2 N neighbours (runtime)")):
        axes[1].plot(hn, [hb[n][scheme]["messages_per_s"] for n in hn], marker="o", label=label)
    axes[1].set_ylabel("heartbeat messages per rank per second (2 rails)")
    axes[1].set_title("Heartbeats")
    for ax in axes[:2]:
        ax.set_yscale("log")
    cut = res["host_cut"]
    cn = sorted(cut)
    for scheme, label in (("all-to-all", "heartbeats all-to-all (earlier runtime)"), ("neighbours", "neighbours + verdict flood (runtime)"),
                          ("off", "heartbeats off")):
        axes[2].plot(cn, [cut[n][scheme]["max_s"] for n in cn], marker="o", label=label)
    axes[2].axhline(1.0, color="red", lw=0.8, ls="--", label="target: 1 s")
    axes[2].set_ylabel("host cut -> last peer knows (s, worst)")
    axes[2].set_title("A host loses every rail")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Control traffic per rank vs N (simulated)")
    figs["control"] = fig
