"""Pure parts of the DDP step-time benchmark (bench/run_ddp_bench.py): the series, summarising
the ranks' step times and judging the target. No torch, no root, no network (unit-tested)."""

import json
import statistics
from typing import Optional, Sequence

TARGET_RATIO = 0.6  # the backend's goal: nezha on 2 equal rails <= 0.6x gloo-one-rail step time
BASELINE = "gloo-1rail"
SUBJECT = "nezha-2rails"
MPTCP = "gloo-mptcp"
SERIES = (SUBJECT, BASELINE, MPTCP)


def parse_report(text: str) -> Optional[dict]:
    """The last `REPORT {json}` line a worker printed, or None."""
    found = None
    for line in text.splitlines():
        if line.startswith("REPORT "):
            found = json.loads(line[len("REPORT "):])
    return found


def launch_median(rank_steps: Sequence[Sequence[float]]) -> float:
    """Step time of one launch: DDP keeps the ranks in lockstep, so take the slowest rank's
    median step (seconds)."""
    if not rank_steps or any(not s for s in rank_steps):
        raise ValueError("step_times: every rank needs at least one timed step")
    return max(statistics.median(s) for s in rank_steps)


def series_median(launch_medians: Sequence[float]) -> Optional[float]:
    return statistics.median(launch_medians) if launch_medians else None


def judge(subject_s: Optional[float], baseline_s: Optional[float],
          target: float = TARGET_RATIO) -> tuple[Optional[float], str]:
    """(ratio subject/baseline step time, PASS|MISS|NOT RUN). Lower is better."""
    if subject_s is None or baseline_s is None or baseline_s <= 0:
        return None, "NOT RUN"
    ratio = subject_s / baseline_s
    return ratio, "PASS" if ratio <= target else "MISS"


def format_row(name: str, median_s: Optional[float], launches: Sequence[float], note: str = "") -> str:
    if median_s is None:
        return f"  {name:13s} {'MISSING':>10s}  {note}".rstrip()
    each = ", ".join(f"{x * 1e3:.0f}" for x in launches)
    return f"  {name:13s} {median_s * 1e3:8.1f} ms  (launches: {each} ms)  {note}".rstrip()
