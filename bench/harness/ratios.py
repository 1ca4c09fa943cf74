"""Per-size ratios of Nezha's algbw against each baseline. A ratio > 1 means Nezha is faster at
that size; a missing size on either side gives None (printed as n/a), never a guess."""

from typing import Optional

NEZHA = "nezha-adaptive"

# (ratio name, numerator series, denominator series). Order = column order in the tables.
RATIO_SPECS = (
    ("nezha/best-single", NEZHA, "nezha-single"),
    ("nezha/gloo-1-rail", NEZHA, "gloo-best-rail"),
    ("nezha/gloo-mptcp", NEZHA, "gloo-mptcp"),
    ("nezha/static", NEZHA, "nezha-static"),
    # Issue 18: Gloo on every rail at the best of a few static splits (harness.hand_split), sizes
    # >= 16 MiB on scenarios with >= 2 rails only; n/a elsewhere.
    ("nezha/gloo-hand-split", NEZHA, "gloo-hand-split"),
    ("nezha/ceiling", NEZHA, "ceiling"),
    ("nezha/ceiling-iperf", NEZHA, "ceiling-iperf"),
)


def by_bytes(rows: Optional[list[dict]]) -> dict[int, dict]:
    return {r["bytes"]: r for r in rows or []}


def ratio(num: Optional[dict], den: Optional[dict]) -> Optional[float]:
    """algbw(num) / algbw(den), None when either is missing, failed its check or is zero."""
    if num is None or den is None:
        return None
    if num.get("check") == "failed" or den.get("check") == "failed":
        return None
    a, b = num.get("algbw_gbps"), den.get("algbw_gbps")
    if not a or not b:
        return None
    return a / b


def compute_ratios(series_rows: dict[str, list[dict]], sizes: list[int]) -> dict[str, list[dict]]:
    """{ratio name: [{"bytes": b, "ratio": r|None}, ...]} for every spec and size."""
    indexed = {name: by_bytes(rows) for name, rows in series_rows.items()}
    out = {}
    for name, num, den in RATIO_SPECS:
        n, d = indexed.get(num, {}), indexed.get(den, {})
        out[name] = [{"bytes": b, "ratio": ratio(n.get(b), d.get(b))} for b in sizes]
    return out
