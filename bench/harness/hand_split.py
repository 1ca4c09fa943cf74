"""Gloo hand-split at the best static ratio, the suite's second baseline: gloo-bench run with one
Gloo context per rail and every allreduce cut by fixed shares (`--iface r0,r1 --split a,b`), at a
few splits around the rails' measured rate proportion; per size the fastest split counts. Only
the pure parts live here (which splits, which one won); runner.py launches them."""

from typing import Optional, Sequence

from .config import Scenario
from .sizes import Band, clip_bands, format_bytes

SERIES_NAME = "gloo-hand-split"

# Only where the target applies (>= 16 MiB, the bandwidth-bound sizes) and where there is
# something to split (>= 2 rails): each split is a launch of its own, so this keeps the extra bench
# time to a few launches per scenario.
MIN_BYTES = 16 << 20
MIN_RAILS = 2

# Moves of the fastest rail's share around the rate-proportional split. At >= 16 MiB the rails are
# bandwidth-bound, so the best static split lies near the rate proportion; what moves it off are
# per-rail costs the rates do not show (TCP window ramp, the ring's per-step latency, CPU time on
# the 2 shared cores). The first measurement (bench/results/issue18-perf, 2026-11-27, offsets
# +-0.05 and +-0.10) found a sharp peak at the proportion: +-0.05 lost 3-13 % of algbw, +-0.10
# lost 25-45 % and never won. So the five launches per size band go where the optimum can be:
# +-0.02 resolves the peak, +-0.05 brackets it. Only the fastest rail's share moves (the others
# keep their proportion among themselves): with 2 rails that is the only degree of freedom, and
# with 3 it keeps five points instead of a grid.
FASTEST_SHARE_OFFSETS = (0.0, -0.02, 0.02, -0.05, 0.05)

# No rail's share goes below this: a near-empty chunk measures one rail's latency, not a split.
MIN_SHARE = 0.02

# Shares go to gloo-bench with 3 decimals (it accepts sums within 0.005 of 1 and renormalises).
DECIMALS = 3


def applies(scenario: Scenario) -> bool:
    return len(scenario.rates_mbit) >= MIN_RAILS


def bands_for(bands: Sequence[Band]) -> list[Band]:
    """The run's bands restricted to the sizes the hand split is measured at."""
    return clip_bands(list(bands), MIN_BYTES, 1 << 62)


def proportional(rates_mbit: Sequence[float]) -> tuple[float, ...]:
    if not rates_mbit or any(r <= 0 for r in rates_mbit):
        raise ValueError(f"hand split: want positive rail rates, got {list(rates_mbit)}")
    total = float(sum(rates_mbit))
    return tuple(r / total for r in rates_mbit)


def shifted(base: Sequence[float], fastest: int, offset: float) -> tuple[float, ...]:
    """base with the fastest rail's share moved by offset, clipped so that every share stays >=
    MIN_SHARE, the other rails scaled to fill the rest in their own proportion, rounded to
    DECIMALS with the rounding error given to the fastest rail (the shares sum to 1 exactly)."""
    n = len(base)
    others = [k for k in range(n) if k != fastest]
    rest = sum(base[k] for k in others)
    # Upper bound: the smallest other rail, scaled down with the rest, must keep MIN_SHARE.
    hi = 1.0 - rest * MIN_SHARE / min(base[k] for k in others)
    share = min(max(base[fastest] + offset, MIN_SHARE), hi)
    scale = (1.0 - share) / rest
    out = [0.0] * n
    for k in others:
        out[k] = round(base[k] * scale, DECIMALS)
    out[fastest] = round(1.0 - sum(out[k] for k in others), DECIMALS)
    return tuple(out)


def candidate_splits(rates_mbit: Sequence[float], fastest: int) -> list[tuple[float, ...]]:
    """The static splits to try: rate-proportional first, then the fastest rail's share moved by
    FASTEST_SHARE_OFFSETS; duplicates (from clipping) dropped, order kept."""
    base = proportional(rates_mbit)
    out: list[tuple[float, ...]] = []
    for offset in FASTEST_SHARE_OFFSETS:
        split = shifted(base, fastest, offset)
        if split not in out:
            out.append(split)
    return out


def format_split(split: Sequence[float]) -> str:
    """0.73/0.27: rail r0's share first."""
    return "/".join(f"{s:.{DECIMALS}f}" for s in split)


def _usable(row: Optional[dict]) -> bool:
    return bool(row) and row.get("check") != "failed" and bool(row.get("algbw_gbps"))


def best_of(candidates: Sequence[tuple[Sequence[float], list[dict]]]) -> list[dict]:
    """Per size, the row of the fastest split: [(split, rows), ...] -> rows sorted by size, each a
    copy of the winner's row plus "best_split" (the winning shares), "candidates" (every split's
    algbw at that size, None where it failed or was not measured) and "best_of" (how many splits
    were tried). A size no split measured usably keeps a failed row, so its ratio stays n/a."""
    sizes = sorted({r["bytes"] for _, rows in candidates for r in rows})
    indexed = [(list(split), {r["bytes"]: r for r in rows}) for split, rows in candidates]
    out = []
    for b in sizes:
        tried = [{"split": split, "algbw_gbps": by.get(b, {}).get("algbw_gbps") if _usable(by.get(b)) else None}
                 for split, by in indexed]
        usable = [(by[b]["algbw_gbps"], i) for i, (_, by) in enumerate(indexed) if _usable(by.get(b))]
        if usable:
            _, i = max(usable, key=lambda t: (t[0], -t[1]))  # ties: the earlier (closer to proportional)
            row = dict(indexed[i][1][b])
            row["best_split"] = indexed[i][0]
        else:
            row = next(dict(by[b]) for _, by in indexed if b in by)
            row["check"] = "failed"
            row["best_split"] = None
        row["candidates"] = tried
        row["best_of"] = len(candidates)
        out.append(row)
    return out


def summary_lines(series: dict) -> list[str]:
    """The text report's lines for the hand-split series: the splits tried and the winner per size."""
    if not series or not series.get("results"):
        return []
    rails = series.get("rails_order", "")
    tried = ", ".join(format_split(c["split"]) for c in series.get("candidates", []))
    lines = [f"{SERIES_NAME}: static splits tried ({rails} shares, around {series.get('proportion_source', '?')} "
             f"rates): {tried}"]
    winners = []
    for r in series["results"]:
        split = r.get("best_split")
        text = f"{format_bytes(r['bytes'])} {format_split(split) if split else 'none'}"
        # The margin over the runner-up says whether the winner stands out from launch noise.
        others = sorted((c["algbw_gbps"] for c in r.get("candidates", []) if c["algbw_gbps"]), reverse=True)
        if split and len(others) > 1:
            text += f" (+{others[0] / others[1] - 1:.1%} over the next)"
        winners.append(text)
    lines.append(f"{SERIES_NAME}: best static split per size: {', '.join(winners)}")
    return lines
