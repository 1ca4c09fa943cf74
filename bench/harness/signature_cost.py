"""Pure parts of the signature-cost benchmark (bench/run_signature_cost.py): what comparing every
collective's signature across ranks before it runs (runtime/python/csrc/op_signature.h) costs,
judged side by side in one launch. No torch, no root, no network (tests/test_signature_cost.py)."""

import statistics
from typing import Optional, Sequence

LARGE_BYTES = 1 << 20
SMALL_BYTES = 64 << 10
# The targets: at >= 1 MiB at most 1 % slower; at <= 64 KiB the suite's latency goal,
# at most 1.05x the reference in the same launch (bench/README.md, "Latency, side by side").
LARGE_TARGET = 1.01
SMALL_TARGET = 1.05
KEEP = 0.98  # trimmed mean: the fastest 98 %, as the suite's side-by-side latency goal


def trimmed_mean(times: Sequence[float], keep: float = KEEP) -> float:
    if not times:
        raise ValueError("no times")
    kept = sorted(times)[:max(1, int(len(times) * keep))]
    return sum(kept) / len(kept)


def size_ratio(rank_times: Sequence[dict]) -> dict:
    """One size: per side the slowest rank's trimmed mean (the ranks are in lockstep), and
    checked over unchecked."""
    on = max(trimmed_mean(t["on"]) for t in rank_times)
    off = max(trimmed_mean(t["off"]) for t in rank_times)
    return {"on_s": on, "off_s": off, "ratio": on / off}


def both_orders(checked_first: dict, unchecked_first: dict) -> dict:
    """One size measured in two launches, the checked group created first in one and second in
    the other: the geometric mean of their ratios, in which a first-group factor cancels (a
    process's first communicator is a few per cent slower at 4-32 KiB whatever it does), with
    both launches' rows kept."""
    ratio = (checked_first["ratio"] * unchecked_first["ratio"]) ** 0.5
    return {"on_s": (checked_first["on_s"] * unchecked_first["on_s"]) ** 0.5,
            "off_s": (checked_first["off_s"] * unchecked_first["off_s"]) ** 0.5,
            "ratio": ratio, "checked_first": checked_first, "unchecked_first": unchecked_first}


def target_for(nbytes: int) -> Optional[float]:
    if nbytes >= LARGE_BYTES:
        return LARGE_TARGET
    if nbytes <= SMALL_BYTES:
        return SMALL_TARGET
    return None


def judge(rows: dict) -> dict:
    """{size: size_ratio row} -> the worst ratio and a verdict per band."""
    out = {}
    for band, pick, target in (("large", lambda n: n >= LARGE_BYTES, LARGE_TARGET),
                               ("small", lambda n: n <= SMALL_BYTES, SMALL_TARGET)):
        ratios = {n: r["ratio"] for n, r in rows.items() if pick(int(n))}
        if not ratios:
            out[band] = {"verdict": "NOT RUN"}
            continue
        worst = max(ratios, key=ratios.get)
        out[band] = {"worst_size": int(worst), "worst": ratios[worst],
                     "median": statistics.median(ratios.values()), "target": target,
                     "verdict": "PASS" if ratios[worst] <= target else "MISS"}
    return out
