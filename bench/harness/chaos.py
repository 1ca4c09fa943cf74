"""The chaos scenario's analysis (bench/README.md, "Chaos scenario"): one rail of one rank is cut
while ranks loop on one allreduce size, then restored. From a tool's loop trace (op completion
times) this computes how long the job stalled, what it delivered while the rail was down, and
whether it came back. Pure functions; the run itself is in chaos_run.py."""

from dataclasses import dataclass
from statistics import median
from typing import Optional


@dataclass(frozen=True)
class Timeline:
    # 64 MiB, the size the chaos goals are set for: ~1 s per op on the 800/300 rails with 4 ranks, so the windows are
    # long enough for tens of ops before, during and after the cut.
    loop_seconds: int = 42
    cut_at: float = 12.0  # seconds after the ranks start
    restore_at: float = 26.0
    bytes: int = 64 << 20
    settle: float = 1.0  # ignored after restore before measuring "after" throughput


def validate_trace(trace, source: str) -> None:
    if not isinstance(trace, dict):
        raise ValueError(f"{source}: want a JSON object")
    for key in ("bytes", "start_unix", "ops", "error"):
        if key not in trace:
            raise ValueError(f"{source}: missing field {key!r}")
    for i, op in enumerate(trace["ops"]):
        if not (isinstance(op, list) and len(op) == 2 and all(isinstance(x, (int, float)) for x in op)):
            raise ValueError(f"{source}: ops[{i}] must be [end_unix, duration_us]")


def _rate_gbps(ends: list[float], lo: float, hi: float, nbytes: int) -> Optional[float]:
    """algbw over completions in (lo, hi]: ops * bytes / window. None for an empty window."""
    if hi <= lo:
        return None
    n = sum(1 for t in ends if lo < t <= hi)
    return n * nbytes / (hi - lo) / 1e9


def share_back_after_restore(trace: dict, cut_unix: float, restore_unix: float, rail: int) -> Optional[float]:
    """Seconds from the restore to the start of the first op (started after the restore) whose
    split gives `rail` at least half its median pre-cut share again (the rail "carrying its
    share"), or to its re-admission when that happened inside an operation (see below); None
    without per-op splits or if it never happened."""
    splits = trace.get("op_split")
    if not splits or len(splits) != len(trace["ops"]):
        return None
    before = [sp[rail] for op, sp in zip(trace["ops"], splits) if op[0] <= cut_unix]
    if not before or median(before) <= 0:
        return None
    want = median(before) / 2
    back = None
    for op, sp in zip(trace["ops"], splits):
        start = op[0] - op[1] / 1e6
        if start >= restore_unix and sp[rail] >= want:
            back = start - restore_unix  # the rail carries its share from this op's start
            break
    # The rail carries nothing before its re-admission (when the trace records it), so an op
    # that started earlier and took the rail in half way does not count from its start. A rail
    # re-admitted inside an operation (between its waves) takes its share of the rest of that
    # operation at once: it carries its share from the re-admission, if the op that ended next
    # after it gave the rail some bytes and the op after that its full share again.
    names = trace.get("rails") or []
    rail_name = names[rail] if rail < len(names) else f"r{rail}"
    for ev in trace.get("readmissions") or []:
        t = ev.get("t_unix")
        if ev.get("rail") != rail_name or t is None or t < restore_unix:
            continue
        readmitted = t - restore_unix
        nxt = [i for i, op in enumerate(trace["ops"]) if op[0] >= t]
        if (nxt and splits[nxt[0]][rail] > 0 and
                (nxt[0] + 1 >= len(splits) or splits[nxt[0] + 1][rail] >= want)):
            return readmitted
        return None if back is None else max(back, readmitted)
    return back


def analyze(trace: dict, cut_unix: float, restore_unix: Optional[float], end_unix: float,
            cut_rail: Optional[int] = None) -> dict:
    """Stall/recovery metrics of one loop trace. Times in the result are seconds after the cut.

    stall_s is the op in flight's extra time: the gap from the last completion before the cut to
    the first one after it, beyond the surviving rails' own pace (the median op during the cut);
    losing the rail's bandwidth is not a stall. worst_gap_excess_s is the longest gap anywhere in
    the cut window beyond that pace (a failure noticed only in a later op shows here; so does
    plain jitter — compare with the control series). slowdown_vs_before_s is the longest gap
    against the pace before the cut (what earlier reports called the stall)."""
    nbytes = trace["bytes"]
    ends = [op[0] for op in trace["ops"]]
    before = [op for op in trace["ops"] if op[0] <= cut_unix]
    baseline_s = median(op[1] for op in before) / 1e6 if before else None
    err = trace.get("error")
    out = {
        "ops_total": len(ends),
        "ops_before_cut": len(before),
        "baseline_op_s": baseline_s,
        "algbw_before_gbps": _rate_gbps(ends, trace["start_unix"] + (before[0][1] / 1e6 if before else 0),
                                        cut_unix, nbytes) if before else None,
        "failed": err is not None,
        "failed_after_cut_s": (err["t_unix"] - cut_unix) if err else None,
        "error": err["message"] if err else None,
    }
    window_end = restore_unix if restore_unix is not None else end_unix
    last_before = max((t for t in ends if t <= cut_unix), default=trace["start_unix"])
    after_cut = [t for t in ends if t > cut_unix]
    out["ops_after_cut"] = len(after_cut)
    if after_cut:
        # Longest wait for an op to complete once the rail is gone.
        prev, worst = last_before, 0.0
        for t in after_cut:
            if t > window_end:
                break
            worst = max(worst, t - prev)
            prev = t
        during = [op[1] / 1e6 for op in trace["ops"] if after_cut[0] < op[0] <= window_end]
        pace_s = median(during) if during else baseline_s
        out["pace_during_cut_s"] = pace_s
        out["stall_s"] = max(after_cut[0] - last_before - (pace_s or 0.0), 0.0)
        out["worst_gap_excess_s"] = max(worst - (pace_s or 0.0), 0.0) if worst else None
        out["slowdown_vs_before_s"] = max(worst - (baseline_s or 0.0), 0.0) if worst else None
        out["first_op_after_cut_s"] = after_cut[0] - cut_unix
        # From the link event: when the op in flight ended, beyond a fresh op at the survivors'
        # pace started at the cut (an upper bound: part of that op ran before the cut).
        out["stall_after_link_event_s"] = max(after_cut[0] - cut_unix - (pace_s or 0.0), 0.0)
    else:
        out["stall_s"] = None  # never completed another op: the stall is unbounded
        out["worst_gap_excess_s"] = None
        out["slowdown_vs_before_s"] = None
        out["stall_after_link_event_s"] = None
        out["pace_during_cut_s"] = None
        out["first_op_after_cut_s"] = None
    # Throughput while the rail is down, from the first completion after the cut (the stall is
    # reported separately) to the restore.
    start_deg = after_cut[0] if after_cut and after_cut[0] <= window_end else None
    out["algbw_during_cut_gbps"] = _rate_gbps(ends, start_deg, window_end, nbytes) if start_deg else (
        0.0 if not err or err["t_unix"] > cut_unix else None)
    if restore_unix is not None:
        out["algbw_after_restore_gbps"] = _rate_gbps(ends, restore_unix + Timeline.settle, end_unix, nbytes)
        out["ops_after_restore"] = sum(1 for t in ends if t > restore_unix)
        out["share_back_after_restore_s"] = (share_back_after_restore(trace, cut_unix, restore_unix, cut_rail)
                                             if cut_rail is not None else None)
    # Recovered: kept completing ops after the cut and never failed.
    out["survived"] = not out["failed"] and bool(after_cut)
    return out


def analyze_fallback(ok: bool, cut_happened: bool, cut_unix: Optional[float], end_unix: float,
                     mean_op_us: Optional[float], iters: int, nbytes: int, error: Optional[str]) -> dict:
    """Outcome of a run without a per-op trace (the tool's sweep mode over the cut): whether it
    survived, its mean algbw across the whole run, or when it failed relative to the cut."""
    failed = not ok
    return {
        "mode": "sweep-fallback",
        "iters": iters,
        "cut_happened": cut_happened,
        "failed": failed,
        "survived": ok and cut_happened,
        "failed_after_cut_s": (end_unix - cut_unix) if failed and cut_unix is not None else None,
        "error": error,
        "stall_s": None,  # unknown without a trace
        "algbw_whole_run_gbps": nbytes / (mean_op_us * 1e3) if ok and mean_op_us else None,
        "algbw_before_gbps": None,
        "algbw_during_cut_gbps": None,
        "algbw_after_restore_gbps": None,
        "ops_total": iters if ok else None,
    }
