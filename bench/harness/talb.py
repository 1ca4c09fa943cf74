"""Pure parts of the TaLB benchmark (bench/run_talb_bench.py): summarising the ranks' per-step
times of the prioritised and the issue-order steps and judging the target. No torch, no root,
no network (unit-tested in tests/test_talb.py)."""

import statistics
from typing import Optional, Sequence

# Time from the start of backward until the first-needed bucket is reduced, with priorities
# over without. With B equal buckets queued behind each other, issue order reduces the first
# layer's bucket last (after ~B bucket times) and priority after at most ~2 (the one already
# on the wire, then it): ideally 2/B, 0.25 at the benchmark's 8 buckets. 0.5 keeps a margin for
# the 2 shared cores and a first bucket that is not the same size as the rest.
TARGET_RATIO = 0.5
MODES = ("prio", "fifo")


def launch_value(rank_rows: Sequence[Sequence[dict]], key: str) -> float:
    """One launch's value of `key` for a mode: DDP keeps the ranks in lockstep, so the slowest
    rank's median over its steps (seconds)."""
    if not rank_rows or any(not rows for rows in rank_rows):
        raise ValueError(f"{key}: every rank needs at least one timed step of this mode")
    return max(statistics.median(r[key] for r in rows) for rows in rank_rows)


def series_median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def judge(prio_s: Optional[float], fifo_s: Optional[float],
          target: float = TARGET_RATIO) -> tuple[Optional[float], str]:
    """(ratio prio/fifo time to the first-needed bucket, PASS|MISS|NOT RUN). Lower is better."""
    if prio_s is None or fifo_s is None or fifo_s <= 0:
        return None, "NOT RUN"
    ratio = prio_s / fifo_s
    return ratio, "PASS" if ratio <= target else "MISS"
