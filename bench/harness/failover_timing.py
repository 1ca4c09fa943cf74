"""The two failure-timing targets (bench/README.md, "Failure timing"), judged from test-bed runs of
nezha-bench's loop mode (pure functions; the runs are in bench/run_failover_timing.py):

- all rails down: every rank ends with the same clear error (the "no rail left" family, naming
  the rails) within 1 s of the last rail going down;
- restore: the restored rail carries its share again within 1 s (harness.chaos's definition:
  the start of the first op with at least half its pre-cut share, or its re-admission when that
  happened inside an operation)."""

from statistics import median
from typing import Optional

ALL_DOWN_GOAL_S = 1.0
SHARE_BACK_GOAL_S = 1.0
ERROR_FAMILY = "no rail left to finish it on"


def error_line(log_text: str) -> Optional[str]:
    """The rank's error line of the "no rail left" family (the first one), or None."""
    for line in log_text.splitlines():
        if ERROR_FAMILY in line:
            return line.strip()
    return None


def judge_all_down(ranks: list[dict], rails: list[str]) -> dict:
    """ranks: per rank {"rc", "exit_after_s", "log"}. Every rank must exit non-zero with an
    error of the family that names every rail; the time is the slowest rank's."""
    problems = []
    for r, k in enumerate(ranks):
        line = error_line(k.get("log", ""))
        if k.get("rc") in (0, None):
            problems.append(f"rank {r} exited {k.get('rc')}")
        if line is None:
            problems.append(f"rank {r}: no '{ERROR_FAMILY}' error")
        elif not all(name in line for name in rails):
            problems.append(f"rank {r}: the error does not name every rail ({', '.join(rails)})")
    times = [k.get("exit_after_s") for k in ranks]
    worst = max(times) if times and all(t is not None for t in times) else None
    return {"worst_s": worst, "per_rank_s": times, "clear": not problems, "problems": problems}


def breakdown_restore(trace: dict, restore_unix: float, rail: int) -> dict:
    """Where the time from the restore went, from rank 0's trace: the re-admission (and whether it
    came between waves of an operation), the rebuild's duration, and the op it landed in."""
    names = trace.get("rails") or []
    name = names[rail] if rail < len(names) else f"r{rail}"
    ev = next((e for e in trace.get("readmissions") or []
               if e.get("rail") == name and e.get("t_unix", 0) >= restore_unix), None)
    out = {"readmitted_after_s": None, "rebuild_s": None, "mid_op": None,
           "wave_rounds": trace.get("wave_rounds"), "mid_op_readmissions": trace.get("mid_op_readmissions")}
    if ev is None:
        return out
    out["readmitted_after_s"] = ev["t_unix"] - restore_unix
    out["rebuild_s"] = ev.get("stall_s")
    ops = trace.get("ops") or []
    splits = trace.get("op_split") or []
    # Between waves: the op in which it was re-admitted (the next to end) carried some of it; at
    # an op boundary (re-admitted at the end of an op) that op carried none.
    nxt = next((i for i, op in enumerate(ops) if op[0] >= ev["t_unix"]), None)
    out["mid_op"] = nxt is not None and nxt < len(splits) and splits[nxt][rail] > 0
    before = [sp[rail] for sp in splits[:5]]
    out["share_before"] = median(before) if before else None
    out["share_last"] = splits[-1][rail] if splits else None
    return out


def verdict(value: Optional[float], goal: float, ok: bool = True) -> str:
    if value is None or not ok:
        return "MISS"
    return "PASS" if value <= goal else "MISS"
