"""The suite's outputs: the text summary (series, rail usage, ratio and goal tables) and the
result files under bench/results/ (timestamped, plus latest.* copies)."""


from .chaos_goals import chaos_goals_text
from .hand_split import SERIES_NAME as HAND_SPLIT, summary_lines as hand_split_lines
from .series import SERIES_ORDER
from .sizes import format_bytes
from .readme_block import rewrite_between
from .results import write_result
from .tables import attainable_note, format_table, goals_table, ratio_table, series_table


def rail_usage_table(scen: dict) -> str:
    """Share of bytes each rail carried per series, from the kernel's interface counters."""
    rows = []
    for name in SERIES_ORDER:
        s = scen["series"].get(name)
        if not s or not s.get("runs"):
            continue
        tx = [0] * len(scen["rates_mbit"])
        for run in s["runs"]:
            for k, b in enumerate(run.get("rail_tx_bytes", [])):
                tx[k] += b
        total = sum(tx) or 1
        rows.append([name, *(f"{b / total:.0%}" for b in tx), f"{sum(tx) / 1e9:.2f}"])
    if not rows:
        return "(no runs)"
    rails = len(scen["rates_mbit"])
    return format_table(["series", *(f"r{k}" for k in range(rails)), "GB sent"], rows)


def summary_text(doc: dict) -> str:
    hw = doc["hardware"]
    out = [
        f"Nezha benchmark suite ({doc['mode']}), {doc['ranks']} ranks, started {doc['started']}",
        f"hardware: {hw['cpu_model']}, {hw['cores']} cores, kernel {hw['kernel']}"
        + (f" (TCP congestion control {hw['tcp_congestion_control']})" if "tcp_congestion_control" in hw else "")
        + f"; {hw['setup']}",
        f"load average at start {', '.join(f'{x:.2f}' for x in hw['loadavg_start'])}"
        + (f", at end {', '.join(f'{x:.2f}' for x in hw['loadavg_end'])}" if "loadavg_end" in hw else ""),
    ]
    if doc.get("note"):
        out.append(f"note: {doc['note']}")
    pinned = [b for b in doc.get("bands", []) if b.get("pinned")]
    if pinned:
        labels = ", ".join(f"{format_bytes(b['min_bytes'])}-{format_bytes(b['max_bytes'])}" for b in pinned)
        out.append(f"pinned bands: {labels} (rank r on core r % {hw['cores']}, every series alike)")
    if "seed" in doc:
        out.append(f"random rail mixes: seed {doc['seed']} "
                   f"(python3 -m bench.run_bench --seed {doc['seed']} draws them again)")
    for scen in doc["scenarios"]:
        rates = "/".join(map(str, scen["rates_mbit"]))
        ranks = f", {scen['ranks']} ranks" if scen.get("ranks", doc["ranks"]) != doc["ranks"] else ""
        out += ["", f"=== {scen['name']}: rails {rates} Mbit/s{ranks} (best rail r{scen['best_rail']}) ==="]
        ceil = f"ceiling algbw {scen['ceiling_algbw_gbps']:.4f} GB/s (TBF)"
        if "iperf" in scen:
            ip = scen["iperf"]
            ceil += (f", {scen['ceiling_iperf_algbw_gbps']:.4f} GB/s (iperf3: alone "
                     f"{', '.join(f'{m:.0f}' for m in ip['alone_mbit'])} Mbit/s, together "
                     f"{ip['together_sum_mbit']:.0f} Mbit/s = {ip['efficiency_together']:.1%} of TBF)")
        out.append(ceil)
        for s in scen["series"].values():
            if s.get("status") in ("skipped", "failed", "partial"):
                out.append(f"{s['name']}: {s['status'].upper()}: {s['reason']}")
        rows = {n: s.get("results", []) for n, s in scen["series"].items()}
        out += ["", "algbw GB/s:", series_table(rows, SERIES_ORDER, scen["sizes"])]
        hs = hand_split_lines(scen["series"].get(HAND_SPLIT, {}))
        if hs:
            out += [""] + hs
        out += ["", "rail usage (kernel tx byte counters, all hosts):", rail_usage_table(scen)]
        out += ["", "ratios (algbw of Nezha adaptive / other; > 1 = Nezha faster):", ratio_table(scen["ratios"])]
    if "chaos" in doc:
        out += ["", chaos_text(doc["chaos"])]
    if "goals" in doc:
        out += ["", "=== goals ===", goals_table(doc["goals"])]
    return "\n".join(out) + "\n"


def _s(v, unit="s", digits=2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}{unit}"


def _phase_share(events: dict, rail: int) -> str:
    """The cut rail's share of all bytes sent, before / during / after the cut (kernel counters)."""
    marks = ["start_tx", "cut_tx", "restore_tx", "end_tx"]
    if not all(m in events for m in marks):
        return "n/a"
    shares = []
    for a, b in zip(marks, marks[1:]):
        per_rail = [sum(h1[k] - h0[k] for h0, h1 in zip(events[a], events[b])) for k in range(len(events[a][0]))]
        total = sum(per_rail)
        shares.append(f"{per_rail[rail] / total:.0%}" if total else "-")
    return "/".join(shares)


def chaos_text(chaos: dict) -> str:
    tl = chaos["timeline"]
    head = (f"=== chaos: rails {'/'.join(map(str, chaos['rates_mbit']))} Mbit/s, r{chaos['cut_rail']} of host "
            f"{chaos['cut_host']} cut at {tl['cut_at']:.0f}s, restored at {tl['restore_at']:.0f}s; loop of "
            f"{tl['bytes']} B allreduces for {tl['loop_seconds']}s; Gloo timeout {chaos['gloo_timeout_ms']} ms ===")
    rows, notes = [], []
    for name, s in chaos["series"].items():
        m = s.get("metrics")
        if not m:
            notes.append(f"{name}: {s['status'].upper()}: {s['reason']}")
            continue
        outcome = f"failed {_s(m['failed_after_cut_s'])} after cut" if m["failed"] else "survived"
        if m.get("mode") == "sweep-fallback":
            outcome += " (no trace)"
            if m["failed"] and m.get("error"):
                notes.append(f"{name}: {m['error']}")
            if not m["failed"]:
                notes.append(f"{name}: mean over the whole run {_s((m['algbw_whole_run_gbps'] or 0) * 8, ' Gbit/s', 3)}")
        gbps = lambda v: _s(v * 8 if v is not None else None, "", 3)  # noqa: E731 (Gbit/s)
        rows.append([name, outcome, _s(m["stall_s"]), _s(m.get("worst_gap_excess_s")),
                     _s(m.get("slowdown_vs_before_s")),
                     gbps(m["algbw_before_gbps"]), gbps(m["algbw_during_cut_gbps"]),
                     gbps(m.get("algbw_after_restore_gbps")), str(m["ops_total"] or "n/a"),
                     _phase_share(s.get("events", {}), chaos["cut_rail"])])
    cut = f"r{chaos['cut_rail']} share"
    table = format_table(["series", "outcome", "stall", "worst gap", "vs before", "before Gbit/s",
                          "rail cut Gbit/s", "after restore", "ops", f"{cut} before/cut/after"], rows,
                         align="llrrrrrrrr") if rows else "(no traces)"
    legend = ("stall: the op in flight's extra time beyond the surviving rails' pace (median op during the cut); "
              "worst gap: the longest gap in the cut window beyond that pace (jitter shows here too: see the "
              "control series); vs before: the longest gap against the pace before the cut")
    return "\n".join([head, table, legend, *notes, "", chaos_goals_text(chaos)])


def write_outputs(doc: dict, results_dir: str, stamp: str, plot_fn=None, prefix: str = "bench") -> dict:
    """The suite's files through the one result writer: <prefix>-<stamp>.{json,txt,png} and their
    latest.* copies (latest-chaos.* for the chaos run, so it never replaces the sweep's latest).
    Returns {suffix: stamped path}."""
    files = {".json": doc, ".txt": summary_text(doc)}
    if plot_fn is not None:
        files[".png"] = lambda path: plot_fn(doc, path)
    return write_result(results_dir, prefix, stamp, files)


README_BEGIN = "<!-- bench-latest:begin (generated by bench/run_bench.py from results/latest.json; do not edit) -->"
README_END = "<!-- bench-latest:end -->"


def readme_block(doc: dict) -> str:
    """The README's "latest results" section: where and how the run was made, and its goals."""
    hw = doc["hardware"]
    load = f"load average {', '.join(f'{x:.2f}' for x in hw['loadavg_start'])} at start"
    if "loadavg_end" in hw:
        load += f", {', '.join(f'{x:.2f}' for x in hw['loadavg_end'])} at end"
    mixes = ", ".join(f"{s['name']} {'/'.join(map(str, s['rates_mbit']))} Mbit/s x {s.get('ranks', doc['ranks'])} ranks"
                      for s in doc["scenarios"])
    lines = [f"{doc['mode'].capitalize()} run started {doc['started']}"
             + (f", {doc['duration_s'] / 60:.1f} min" if "duration_s" in doc else "")
             + f", on {hw['cpu_model']} ({hw['cores']} cores), {load}.",
             "", f"Scenarios: {mixes}." + (f" Random mixes drawn with seed {doc['seed']}." if "seed" in doc else ""),
             ""]
    if doc.get("note"):
        lines += [f"Note: {doc['note']}.", ""]
    lines += ["| goal | scope | target | measured | status |", "|---|---|---|---|---|"]
    for g in doc.get("goals", []):
        if g["worst"] is None:
            measured = "no data"
        else:
            unit = "x time" if g["kind"] == "latency" else "x"
            measured = f"worst {g['worst']:.2f}{unit} at {g['worst_at']} (median {g['median']:.2f}{attainable_note(g)})"
        target = f"{'<=' if g['kind'] == 'latency' else '>='} {g['target']:.2f}"
        lines.append(f"| {g['goal']} | {g['scope']} | {target} | {measured} | {g['status']} |")
    return "\n".join(lines)


def update_readme(path: str, doc: dict) -> None:
    """Rewrite the generated block of bench/README.md from a result document."""
    rewrite_between(path, README_BEGIN, README_END, readme_block(doc))
