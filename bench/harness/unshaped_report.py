"""The text summary of bench/run_unshaped.py: per size, every series' busbw and CPU cycles per
byte side by side, the ratios to Gloo, and the verdicts (B), (U) and (C) (bench/README.md, "Unshaped rails")."""

from .sizes import format_bytes
from .unshaped import GLOO, Cell, best_nezha_ratios, ratios


def _f(x, fmt):
    return "n/a" if x is None else format(x, fmt)


def table(cells: dict[str, dict[int, Cell]], order: list[str], sizes: list[int]) -> list[str]:
    """One block per series (busbw, cycles/B of the rank processes, of the whole machine, fixed
    cost), then the ratio block."""
    lines = [f"{'series':34s} {'size':>5s} {'busbw GB/s':>10s} {'cyc/B ranks':>11s} {'cyc/B machine':>13s} "
             f"{'CPU/op ms':>9s} {'fixed CPU s':>11s}"]
    for name in order:
        for s in sizes:
            c = cells.get(name, {}).get(s)
            if c is None:
                lines.append(f"{name:34s} {format_bytes(s):>5s} {'not measured':>10s}")
                continue
            lines.append(f"{name:34s} {format_bytes(s):>5s} {c.busbw_gbps:10.3f} {c.cycles_per_byte:11.2f} "
                         f"{_f(c.machine_cycles_per_byte, '13.2f')} {c.cpu_per_op_s * 1e3:9.3f} "
                         f"{c.fixed_cpu_s:11.2f}")
    lines.append("")
    nezha = [n for n in order if n != GLOO and n in cells]
    if GLOO not in cells:
        return lines + ["(no gloo-best-rail series: no ratios)"]
    per = {n: ratios(cells, n) for n in nezha}
    head = f"{'busbw / gloo-best-rail':>34s} " + " ".join(f"{format_bytes(s):>6s}" for s in sizes)
    lines.append(head)
    for n in nezha:
        lines.append(f"{n:>34s} " + " ".join(f"{_f(per[n].get(s), '6.2f')}" for s in sizes))
    cyc = {n: {s: cells[n][s].cycles_per_byte / cells[GLOO][s].cycles_per_byte
               for s in sizes if s in cells[n] and s in cells[GLOO] and cells[GLOO][s].cycles_per_byte > 0}
           for n in nezha}
    lines.append(f"{'cycles/B / gloo':>34s}")
    for n in nezha:
        lines.append(f"{n:>34s} " + " ".join(f"{_f(cyc[n].get(s), '6.2f')}" for s in sizes))
    best = best_nezha_ratios(cells)
    if best:
        lines.append(f"{'best nezha / gloo':>34s} " + " ".join(
            f"{_f(best[s][1] if s in best else None, '6.2f')}" for s in sizes))
    return lines


def verdict_lines(v: dict) -> list[str]:
    b, u, c = v["B"], v["U"], v.get("C")

    def why(j):
        parts = []
        if j["below"]:
            parts.append("below at " + ", ".join(format_bytes(s) for s in j["below"]))
        if j["missing"]:
            parts.append("not measured at " + ", ".join(format_bytes(s) for s in j["missing"]))
        return f" ({'; '.join(parts)})" if parts else ""

    return [f"{b['status']:<4} (B) nezha-single busbw >= {b['goal']:.2f}x gloo-best-rail at every size >= 64K: "
            f"worst {_f(b['worst'], '.2f')}x{why(b)}",
            f"{u['status']:<4} (U) best Nezha busbw >= {u['goal']:.2f}x gloo-best-rail (one rail) at every size: "
            f"worst {_f(u['worst'], '.2f')}x{why(u)}"] + ([
        f"{c['status']:<4} (C) nezha-adaptive (two rails) bytes per CPU second >= {c['goal']:.2f}x gloo-best-rail "
        f"(one rail) at every size: worst {_f(c['worst'], '.2f')}x{why(c)}"] if c else [])
