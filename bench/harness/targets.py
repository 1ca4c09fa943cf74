"""The host-default targets (bench/README.md, "Targets on the host default and on reno"): one row
per target, judged PASS/MISS from the runs of one congestion control's pass of `make bench`
(bench/run_targets.py). A pass is four result documents, each read as its run wrote it:

  suite     bench/run_bench.py: the rail sweep with the random rail mixes (ratios per scenario)
  faults    bench/run_bench.py --chaos: cut (chaos["series"]) and black hole, gray (chaos["faults"])
  unshaped  bench/run_unshaped.py: CPU cycles per byte on unshaped rails, and its profile
  ddp       bench/run_ddp_bench.py: DDP step time

Nothing here measures; every number comes from those documents, so a pass can be judged again
(`python3 -m bench.run_targets --report`) after a change in judging."""

from dataclasses import dataclass
from typing import Callable, Optional

from . import chaos_goals, goals
from .goals import INCOMPLETE, MISS, NOT_RUN, PASS, Goal
from .ratios import compute_ratios
from .sizes import format_bytes
from .unshaped import GOAL_BYTES_PER_CPU, bytes_per_cpu_ratios

SOURCES = ("suite", "faults", "unshaped", "ddp")

SUM_TARGET = 0.97  # of the sum of single-rail speeds (iperf3, same run), random rail mixes
SUM_MIN_BYTES = 16 << 20  # the sizes that move bytes: the same scope as the suite's random-mix goal
EQUAL_RAILS_TARGET = 1.9
FAULT_STALL_S = 0.5  # cut, black hole: the operation in flight beyond the surviving rails' pace
GRAY_STALL_S = 1.0  # gray (1/40 of the rate): the worst gap, since a gray rail is found in a later op
PACE_TARGET = 0.95  # while the rail is out, of the surviving rail alone (Gloo bound to it, same run)
SHARE_BACK_S = 1.0  # heal -> the rail carries its share again
DDP_TARGET = 0.6  # nezha on 2 rails / gloo on 1 rail, step time


@dataclass(frozen=True)
class Target:
    id: str
    text: str
    target: str  # as printed: ">= 0.97", "<= 0.5 s"
    source: str  # which document of the pass judges it (SOURCES)


TARGETS = (
    Target("sum-random", "random mixes: of the sum of single-rail speeds (iperf3), >= 16M", f">= {SUM_TARGET}",
           "suite"),
    Target("equal-rails", "equal rails (500/500): x one rail, >= 4M", f">= {EQUAL_RAILS_TARGET}x", "suite"),
    Target("same-rail-large", "one rail / Gloo on the same rail, >= 1M", f">= {goals.SAME_RAIL_LARGE_TARGET}x",
           "suite"),
    Target("same-rail-mid", "one rail / Gloo on the same rail, 64K-512K", f">= {goals.SAME_RAIL_MID_TARGET}x",
           "suite"),
    Target("latency", "<= 64K latency / best single rail, same launch", f"<= {goals.LATENCY_TARGET}x", "suite"),
    Target("cut-stall", "cut: stall of the op in flight", f"<= {FAULT_STALL_S} s", "faults"),
    Target("hole-stall", "black hole: stall of the op in flight", f"<= {FAULT_STALL_S} s", "faults"),
    Target("gray-stall", "gray (1/40 rate): worst stall", f"<= {GRAY_STALL_S:.0f} s", "faults"),
    Target("cut-pace", "cut: pace while out / surviving rail", f">= {PACE_TARGET}", "faults"),
    Target("hole-pace", "black hole: pace after detection / surviving rail", f">= {PACE_TARGET}", "faults"),
    Target("gray-pace", "gray: pace while out / surviving rail", f">= {PACE_TARGET}", "faults"),
    Target("cut-share-back", "cut: restore -> share back", f"<= {SHARE_BACK_S:.0f} s", "faults"),
    Target("hole-share-back", "black hole: heal -> share back", f"<= {SHARE_BACK_S:.0f} s", "faults"),
    Target("gray-share-back", "gray: heal -> share back", f"<= {SHARE_BACK_S:.0f} s", "faults"),
    Target("hole-probe-kept", "black hole: re-admissions during the hole (probe kept)", "= 0", "faults"),
    Target("cpu-per-byte", "unshaped: bytes per CPU s, 2 rails / Gloo on 1, every size",
           f">= {GOAL_BYTES_PER_CPU}x", "unshaped"),
    Target("ddp-step", "DDP step, Nezha 2 rails / Gloo 1 rail", f"<= {DDP_TARGET}x", "ddp"),
)


def cell(status: str, value: str = "") -> dict:
    return {"status": status, "value": value}


# ---- the suite ------------------------------------------------------------------------------------
def _suite_goal(target_id: str, scenarios: tuple[str, ...]) -> Goal:
    drawn = tuple(s for s in scenarios if s.startswith(goals.RANDOM_PREFIX))
    large, mid = goals.same_rail_goals(scenarios)
    return {
        "sum-random": Goal("sum-random", "", "nezha/ceiling-iperf", drawn, SUM_TARGET, min_bytes=SUM_MIN_BYTES),
        "equal-rails": Goal("equal-rails", "", "nezha/best-single", ("homogeneous",), EQUAL_RAILS_TARGET,
                            min_bytes=4 << 20),
        "same-rail-large": large,
        "same-rail-mid": mid,
        "latency": Goal("latency", "", "nezha/best-single-paired", scenarios, goals.LATENCY_TARGET,
                        max_bytes=64 << 10, kind="latency"),
    }[target_id]


def suite_ratios(doc: dict) -> dict:
    """{scenario: ratios}, computed again from the series' rows, so a run recorded before a ratio
    existed (Nezha on one rail / Gloo on the same rail) is judged on it too."""
    return {s["name"]: compute_ratios({n: x.get("results", []) for n, x in s["series"].items()}, s["sizes"])
            for s in doc.get("scenarios", [])}


def judge_suite(target_id: str, doc: dict) -> dict:
    ratios = suite_ratios(doc)
    goal = _suite_goal(target_id, tuple(ratios))
    if not goal.scenarios:
        return cell(NOT_RUN, "no random rail mix in this run")
    got = goals.evaluate(goal, ratios)
    if got["worst"] is None:
        return cell(got["status"], "no data")
    unit = "x time" if goal.kind == "latency" else "x"
    return cell(got["status"], f"{got['worst']:.3f}{unit} at {got['worst_at']}")


# ---- fault timing -----------------------------------------------------------------------------------
def _fault_values(chaos: dict) -> dict:
    """The measured values of the chaos run's goal rows, by the chaos goals' own ids."""
    rows = chaos_goals.evaluate_chaos(chaos) + chaos_goals.evaluate_faults(chaos)
    return {r["id"]: r["value"] for r in rows}


# target id -> (chaos goal id, how to print the value, PASS when)
_FAULT_RULES: dict[str, tuple[str, Callable[[float], str], Callable[[float], bool]]] = {
    "cut-stall": ("chaos-stall", lambda v: f"{v:.3f} s", lambda v: v <= FAULT_STALL_S),
    "hole-stall": ("hole-stall", lambda v: f"{v:.3f} s", lambda v: v <= FAULT_STALL_S),
    "gray-stall": ("gray-stall", lambda v: f"{v:.3f} s", lambda v: v <= GRAY_STALL_S),
    "cut-pace": ("chaos-throughput", lambda v: f"{v:.3f}", lambda v: v >= PACE_TARGET),
    "hole-pace": ("hole-throughput", lambda v: f"{v:.3f}", lambda v: v >= PACE_TARGET),
    "gray-pace": ("gray-pace", lambda v: f"{v:.3f}", lambda v: v >= PACE_TARGET),
    "cut-share-back": ("chaos-readmit", lambda v: f"{v:.3f} s", lambda v: v <= SHARE_BACK_S),
    "hole-share-back": ("hole-share-back", lambda v: f"{v:.3f} s", lambda v: v <= SHARE_BACK_S),
    "gray-share-back": ("gray-share-back", lambda v: f"{v:.3f} s", lambda v: v <= SHARE_BACK_S),
    "hole-probe-kept": ("hole-no-readmit", lambda v: f"{v:.0f}", lambda v: v == 0),
}


def judge_fault(target_id: str, doc: dict) -> dict:
    if "chaos" not in doc:
        return cell(NOT_RUN, "no chaos run in the document")
    goal_id, show, ok = _FAULT_RULES[target_id]
    v = _fault_values(doc["chaos"]).get(goal_id)
    if v is None:
        return cell(INCOMPLETE, "not measured")
    return cell(PASS if ok(v) else MISS, show(v))


# ---- CPU per byte, DDP ----------------------------------------------------------------------------
def judge_cpu_per_byte(doc: dict) -> dict:
    cycles = {name: {int(size): c["cycles_per_byte"] for size, c in by.items()}
              for name, by in doc.get("cells", {}).items()}
    per_size = bytes_per_cpu_ratios(cycles)
    sizes = doc.get("args", {}).get("sizes") or sorted(per_size)
    if not per_size:
        return cell(NOT_RUN, "no nezha-adaptive and gloo-best-rail cells")
    missing = [s for s in sizes if s not in per_size]
    worst = min(per_size, key=per_size.get)
    value = f"{per_size[worst]:.2f}x at {format_bytes(worst)}"
    if per_size[worst] < GOAL_BYTES_PER_CPU:
        return cell(MISS, value)
    if missing:
        return cell(INCOMPLETE, value + f" (not measured at {', '.join(format_bytes(s) for s in missing)})")
    return cell(PASS, value)


def judge_ddp(doc: dict) -> dict:
    v = doc.get("goal", {}).get("value")
    if v is None:
        return cell(NOT_RUN, "no step-time ratio")
    return cell(PASS if v <= DDP_TARGET else MISS, f"{v:.3f}x")


# ---- one pass ------------------------------------------------------------------------------------
def judge_target(t: Target, doc: Optional[dict]) -> dict:
    if doc is None:
        return cell(NOT_RUN, f"no {t.source} run")
    if t.source == "suite":
        return judge_suite(t.id, doc)
    if t.source == "faults":
        return judge_fault(t.id, doc)
    if t.source == "unshaped":
        return judge_cpu_per_byte(doc)
    return judge_ddp(doc)


def judge_pass(docs: dict[str, Optional[dict]]) -> dict[str, dict]:
    """{target id: {"status", "value"}} for one pass: docs maps SOURCES to a document or None."""
    unknown = set(docs) - set(SOURCES)
    if unknown:
        raise ValueError(f"judge_pass: unknown sources {sorted(unknown)} (want {', '.join(SOURCES)})")
    return {t.id: judge_target(t, docs.get(t.source)) for t in TARGETS}


def source_info(name: str, doc: Optional[dict]) -> dict:
    """What a source ran on: the bed's congestion control and the load average at start and end."""
    if doc is None:
        return {"source": name, "ran": False}
    hw = doc.get("hardware") or doc.get("host") or {}
    return {"source": name, "ran": True, "started": doc.get("started") or doc.get("time_utc"),
            "tcp_congestion_control": hw.get("tcp_congestion_control", "unknown"),
            "loadavg_start": hw.get("loadavg_start"), "loadavg_end": hw.get("loadavg_end")}
