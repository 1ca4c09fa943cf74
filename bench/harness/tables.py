"""Plain-text tables for the terminal and the README: series algbw per size, ratio tables per
scenario, and the goals table."""

from typing import Optional, Sequence

from .ratios import RATIO_NAMES, by_bytes
from .sizes import format_bytes


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """align: one letter per column, l or r; default: first column left, numbers right."""
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers) or set(align) - {"l", "r"}:
        raise ValueError(f"format_table: align {align!r} must be l/r per column ({len(headers)})")
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"format_table: row has {len(row)} cells, want {len(headers)}: {row!r}")
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def fmt_ratio(r: Optional[float]) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def fmt_num(v: Optional[float], digits: int = 4) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def series_table(series_rows: dict[str, list[dict]], order: Sequence[str], sizes: list[int]) -> str:
    """algbw (GB/s) per size, one column per series in `order` that has rows."""
    names = [n for n in order if series_rows.get(n)]
    idx = {n: by_bytes(series_rows[n]) for n in names}
    rows = []
    for b in sizes:
        cells = [format_bytes(b)]
        for n in names:
            row = idx[n].get(b)
            if row is None:
                cells.append("n/a")
            elif row.get("check") == "failed":
                cells.append("FAILED")
            else:
                cells.append(fmt_num(row["algbw_gbps"]))
        rows.append(cells)
    return format_table(["size", *names], rows)


def ratio_table(ratios: dict[str, list[dict]]) -> str:
    """One row per size, one column per ratio (in RATIO_NAMES order)."""
    names = [name for name in RATIO_NAMES if name in ratios]
    if not names:
        return "(no ratios)"
    sizes = [r["bytes"] for r in ratios[names[0]]]
    rows = []
    for i, b in enumerate(sizes):
        rows.append([format_bytes(b), *(fmt_ratio(ratios[n][i]["ratio"]) for n in names)])
    return format_table(["size", *names], rows)


def attainable_note(g: dict) -> str:
    """Where the rails' measured sum caps the ratio below the target, say so next to the miss."""
    bound = g.get("attainable_at_worst")
    if bound is None or bound >= g["target"]:
        return ""
    return f"; at most {bound:.2f}x possible there (iperf3 sum / baseline)"


def goals_table(results: list[dict]) -> str:
    rows = []
    for g in results:
        if g["worst"] is None:
            measured = "no data"
        else:
            unit = "x time" if g["kind"] == "latency" else "x"
            # The median says whether a miss is one noisy size or the rule.
            measured = (f"worst {g['worst']:.2f}{unit} at {g['worst_at']} "
                        f"(median {g['median']:.2f}, best {g['best']:.2f})" + attainable_note(g))
        holes = []
        if g.get("sizes_missing"):
            holes.append(f"{g['sizes_missing']} sizes n/a")
        if g.get("scenarios_missing"):
            holes.append("not run: " + ", ".join(g["scenarios_missing"]))
        if holes:
            measured += " [" + "; ".join(holes) + "]"
        target = f"{'<=' if g['kind'] == 'latency' else '>='} {g['target']:.2f}"
        rows.append([g["goal"], g["scope"], target, measured, g["status"]])
    return format_table(["goal", "scope", "target", "measured", "status"], rows, align="llrll")
