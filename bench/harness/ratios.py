"""Per-size ratios of Nezha's algbw against each baseline. A ratio > 1 means Nezha is faster at
that size; a missing size on either side gives None (printed as n/a), never a guess."""

from typing import Optional

from .merge import PAIRED_STATS, paired_speedup

NEZHA = "nezha-adaptive"
SAME_RAIL = "single/gloo-same-rail"
# The adaptive series against the best single rail measured in the same launches (Band.paired:
# nezha-bench --paired-policy single, interleaved): the median over repeats of each launch's own
# ratio of trimmed means (judged), and of plain means (reported). n/a without a pair. Where the
# single series carries the reverse pair (--paired-policy adaptive), the ratio is the geometric
# mean of both directions: nezha-bench's first communicator is slower than its second at some
# sizes whatever its policy (series.paired_args), a factor that cancels in that mean.
PAIRED_SINGLE = "nezha/best-single-paired"
PAIRED_SINGLE_MEAN = "nezha/best-single-paired-mean"

# (ratio name, numerator series, denominator series). Order = column order in the tables.
RATIO_SPECS = (
    ("nezha/best-single", NEZHA, "nezha-single"),
    ("nezha/gloo-1-rail", NEZHA, "gloo-best-rail"),
    ("nezha/gloo-mptcp", NEZHA, "gloo-mptcp"),
    ("nezha/static", NEZHA, "nezha-static"),
    # The hand-split baseline: Gloo on every rail at the best of a few static splits (harness.hand_split), sizes
    # >= 16 MiB on scenarios with >= 2 rails only; n/a elsewhere.
    ("nezha/gloo-hand-split", NEZHA, "gloo-hand-split"),
    ("nezha/ceiling", NEZHA, "ceiling"),
    ("nezha/ceiling-iperf", NEZHA, "ceiling-iperf"),
    # Nezha on one rail against Gloo on that same rail: the runtime's own cost per byte, with the
    # split out of the picture (bench/README.md, "Targets on the host default and on reno").
    (SAME_RAIL, "nezha-single", "gloo-best-rail"),
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


RATIO_NAMES = tuple(name for name, _, _ in RATIO_SPECS) + (PAIRED_SINGLE, PAIRED_SINGLE_MEAN)


def paired_ratio(row: Optional[dict], stat: str = "op_trimmed_us") -> Optional[float]:
    """The side-by-side speedup of a row of the adaptive series by `stat` (merge.PAIRED_STATS;
    the median over its repeats when it has them), None when it has no pair or failed its check."""
    if row is None or row.get("check") == "failed":
        return None
    field = dict(PAIRED_STATS)[stat]
    return row[field] if row.get(field) else paired_speedup(row, stat)


def compute_ratios(series_rows: dict[str, list[dict]], sizes: list[int]) -> dict[str, list[dict]]:
    """{ratio name: [{"bytes": b, "ratio": r|None}, ...]} for every name in RATIO_NAMES and size."""
    indexed = {name: by_bytes(rows) for name, rows in series_rows.items()}
    out = {}
    for name, num, den in RATIO_SPECS:
        n, d = indexed.get(num, {}), indexed.get(den, {})
        out[name] = [{"bytes": b, "ratio": ratio(n.get(b), d.get(b))} for b in sizes]
    adaptive, single = indexed.get(NEZHA, {}), indexed.get("nezha-single", {})
    for name, stat in ((PAIRED_SINGLE, "op_trimmed_us"), (PAIRED_SINGLE_MEAN, "time_us")):
        out[name] = [{"bytes": b, "ratio": both_directions(adaptive.get(b), single.get(b), stat)}
                     for b in sizes]
    return out


def both_directions(adaptive: Optional[dict], single: Optional[dict], stat: str) -> Optional[float]:
    """Adaptive's speedup over single from the launch where adaptive is the first communicator
    and, when the single series ran the reverse launch (single first, adaptive paired: its ratio
    is single's speedup over adaptive), the geometric mean of both, in which a first-communicator
    factor cancels. Results from before the reverse launch give the one direction; a reverse
    launch that failed gives n/a, not the biased half."""
    adaptive_first = paired_ratio(adaptive, stat)
    if adaptive_first is None or single is None or "paired" not in single:
        return adaptive_first
    single_first = paired_ratio(single, stat)
    return None if single_first is None else (adaptive_first / single_first) ** 0.5
