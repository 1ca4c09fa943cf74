"""The NCCL plugin under faults (docs/nccl.md "Benchmark"): a ring allreduce loop through the plugin
on two rails while one host's rail is cut, black-holed or turned gray, judged from rank 0's
per-operation trace with the chaos scenario's analysis (chaos.py). Pure functions; the run is in
run_nccl_bench.py."""

from typing import Optional

from .chaos import analyze

# The plugin's targets under a fault: the operation in flight stalls at most this long beyond
# the surviving rail's own pace, and while the rail is out the loop keeps at least this fraction
# of what the surviving rail alone delivers (the plugin on that one rail, same bed, same run).
STALL_GOAL_S = 1.0
PACE_GOAL = 0.9


def trace_of(doc: dict, source: str) -> dict:
    """The chaos trace of one harness result (a --seconds ring loop's JSON line)."""
    for key in ("bytes", "start_unix", "op_trace"):
        if key not in doc:
            raise ValueError(f"{source}: the harness result has no {key!r} (not a --seconds ring loop?)")
    return {"bytes": doc["bytes"], "start_unix": doc["start_unix"], "ops": doc["op_trace"], "error": None}


def steady_gbps(trace: dict) -> Optional[float]:
    """algbw of a fault-free loop after its first operation (connection set-up): ops x bytes over
    the time from the first completion to the last."""
    ends = [op[0] for op in trace["ops"]]
    if len(ends) < 3 or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) * trace["bytes"] / (ends[-1] - ends[0]) / 1e9


def delivered_gbps(trace: dict, on_unix: float, off_unix: float) -> Optional[float]:
    """algbw while the rail is out: from the first completion after the fault's onset (the stall is
    judged apart) to its end, counting the operation in flight at the end for the part of it done
    by then (linear between the completions around the end). The chaos analysis counts whole
    operations only, which reads up to one operation short (~175 ms of a ~4.8 s window here, 1.8 %
    on average) against a baseline (steady_gbps) measured between completions; None without one."""
    ends = sorted(op[0] for op in trace["ops"])
    after = [t for t in ends if t > on_unix]
    if not after or after[0] >= off_unix:
        return None
    lo = after[0]
    done = [t for t in after if t <= off_unix]
    later = [t for t in after if t > off_unix]
    in_flight = (off_unix - done[-1]) / (later[0] - done[-1]) if later else 0.0
    return (len(done) - 1 + in_flight) * trace["bytes"] / (off_unix - lo) / 1e9


def judge_fault(kind: str, trace: dict, on_unix: float, off_unix: float, one_rail_gbps: Optional[float]) -> dict:
    """Stall and pace of one fault run against the goals, PASS/MISS each."""
    m = analyze(trace, on_unix, off_unix, trace["ops"][-1][0] if trace["ops"] else off_unix)
    stall = m.get("stall_s")
    during = delivered_gbps(trace, on_unix, off_unix)
    whole = m.get("algbw_during_cut_gbps")
    pace = during / one_rail_gbps if during is not None and one_rail_gbps else None
    return {
        "fault": kind,
        "ops": m["ops_total"],
        "stall_s": stall,
        "algbw_during_gbps": during,
        "pace_vs_one_rail": pace,
        # The chaos analysis's whole-operations count, kept for comparison with earlier runs.
        "pace_whole_ops_vs_one_rail": whole / one_rail_gbps if whole is not None and one_rail_gbps else None,
        "stall_verdict": "PASS" if stall is not None and stall <= STALL_GOAL_S else "MISS",
        "pace_verdict": "PASS" if pace is not None and pace >= PACE_GOAL else "MISS",
    }
