"""The rail-failure chaos goals (bench/README.md, "Chaos scenario"), judged from one chaos run's
series (each measured in the same run): the stall of the operation in flight, Nezha's throughput
while the rail is down against the surviving rail alone (Gloo bound to it, the control series), and
the time from the restore to the cut rail carrying its share again."""

from typing import Optional

from .goals import INCOMPLETE, MISS, PASS

NEZHA, SURVIVOR = "nezha-adaptive", "gloo-best-rail"
# The cut's stall limit is the black hole's, 0.5 s (it was 0.2 s; the newer target, bench/README.md
# "Targets on the host default and on reno", wins).
STALL_GOAL_S, STALL_AIM_S = 0.500, 0.050
THROUGHPUT_GOAL = 0.95
# Restore/heal -> the rail carries its share again, for every kind of fault (cut, black hole,
# gray), with the re-admission probe kept (runtime/src/failover/readmission.cc).
SHARE_BACK_GOAL_S = 1.0


def _metrics(chaos: dict, name: str) -> Optional[dict]:
    s = chaos.get("series", {}).get(name)
    return s.get("metrics") if s else None


def _judge(value: Optional[float], ok) -> str:
    return INCOMPLETE if value is None else PASS if ok(value) else MISS


def evaluate_chaos(chaos: dict) -> list[dict]:
    """One row per goal: id, text, value, verdict (PASS / MISS / INCOMPLETE when not measured)."""
    nz, ctl = _metrics(chaos, NEZHA), _metrics(chaos, SURVIVOR)
    stall = nz.get("stall_s") if nz and not nz["failed"] else None
    link = nz.get("stall_after_link_event_s") if nz and not nz["failed"] else None
    during = nz.get("algbw_during_cut_gbps") if nz else None
    alone = ctl.get("algbw_during_cut_gbps") if ctl and not ctl["failed"] else None
    ratio = during / alone if during is not None and alone else None
    back = nz.get("share_back_after_restore_s") if nz else None
    return [
        {"id": "chaos-stall", "text": f"stall of the op in flight <= {STALL_GOAL_S * 1e3:.0f} ms "
                                      "(beyond the surviving rails' pace)",
         "value": stall, "verdict": _judge(stall, lambda v: v <= STALL_GOAL_S)},
        {"id": "chaos-stall-aim", "text": f"aim: <= {STALL_AIM_S * 1e3:.0f} ms after the link event",
         "value": link, "verdict": _judge(link, lambda v: v <= STALL_AIM_S)},
        {"id": "chaos-throughput", "text": f"throughput during the cut >= {THROUGHPUT_GOAL} x the surviving "
                                           "rail alone (Gloo bound to it, same run)",
         "value": ratio, "verdict": _judge(ratio, lambda v: v >= THROUGHPUT_GOAL)},
        {"id": "chaos-readmit", "text": f"restore -> rail carrying its share again <= {SHARE_BACK_GOAL_S:.0f} s",
         "value": back, "verdict": _judge(back, lambda v: v <= SHARE_BACK_GOAL_S)},
    ]


HOLE_DETECT_GOAL_S = 1.0
HOLE_STALL_GOAL_S = 0.5  # the op in flight, beyond the surviving rails' pace
HOLE_THROUGHPUT_GOAL = 0.95
GRAY_STALL_GOAL_S = 1.0
GRAY_PACE_GOAL = 0.95


def _fault_series(chaos: dict, kind: str, name: str) -> Optional[dict]:
    return chaos.get("faults", {}).get(kind, {}).get("series", {}).get(name)


def evaluate_faults(chaos: dict) -> list[dict]:
    """The goals for the black hole and the gray rail, each against the surviving rail's
    pace measured in the same run (Gloo bound to the other rail, looping through the same fault)."""
    rows = []
    nz = _fault_series(chaos, "blackhole", NEZHA)
    ctl = _fault_series(chaos, "blackhole", SURVIVOR)
    detect = throughput = readmitted = None
    if nz and nz.get("trace") and nz.get("events") and not nz["metrics"]["failed"]:
        t0, tr = nz["t0_unix"], nz["trace"]
        hole, healed = t0 + nz["events"]["cut_unix"], t0 + nz["events"].get("restore_unix", 1e18)
        fo = [f for f in tr.get("failovers", []) if f["t_unix"] >= hole]
        if fo:
            detect = fo[0]["t_unix"] - hole
            ends = [op[0] for op in tr["ops"]]
            n = sum(1 for t in ends if fo[0]["t_unix"] < t <= healed)
            mine = n * tr["bytes"] / (healed - fo[0]["t_unix"]) / 1e9 if healed > fo[0]["t_unix"] else None
            alone = ctl["metrics"].get("algbw_during_cut_gbps") if ctl and not ctl["metrics"]["failed"] else None
            throughput = mine / alone if mine is not None and alone else None
        readmitted = sum(1 for r in tr.get("readmissions", []) if hole < r["t_unix"] < healed)
    rows.append({"id": "hole-detect", "text": f"black hole detected <= {HOLE_DETECT_GOAL_S:.0f} s",
                 "value": detect, "verdict": _judge(detect, lambda v: v <= HOLE_DETECT_GOAL_S)})
    rows.append({"id": "hole-throughput",
                 "text": f"black hole: throughput after detection >= {HOLE_THROUGHPUT_GOAL} x the surviving rail",
                 "value": throughput, "verdict": _judge(throughput, lambda v: v >= HOLE_THROUGHPUT_GOAL)})
    rows.append({"id": "hole-no-readmit", "text": "black hole: no re-admission while the hole lasts",
                 "value": readmitted, "verdict": _judge(readmitted, lambda v: v == 0)})
    hole_m = _ok_metrics(nz)
    rows.append(_at_most("hole-stall", f"black hole: stall of the op in flight <= {HOLE_STALL_GOAL_S} s",
                         hole_m.get("stall_s"), HOLE_STALL_GOAL_S))
    rows.append(_at_most("hole-share-back", f"black hole: heal -> rail carrying its share <= {SHARE_BACK_GOAL_S:.0f} s",
                         hole_m.get("share_back_after_restore_s"), SHARE_BACK_GOAL_S))
    g = _fault_series(chaos, "gray", NEZHA)
    gray_m = _ok_metrics(g)
    rows.append(_at_most("gray-stall", f"gray rail (1/40 speed): worst stall <= {GRAY_STALL_GOAL_S:.0f} s",
                         gray_m.get("worst_gap_excess_s"), GRAY_STALL_GOAL_S))
    during = gray_m.get("algbw_during_cut_gbps")
    alone = _ok_metrics(_fault_series(chaos, "gray", SURVIVOR)).get("algbw_during_cut_gbps")
    pace = during / alone if during is not None and alone else None
    rows.append({"id": "gray-pace", "text": f"gray rail: pace while it is out >= {GRAY_PACE_GOAL} x the surviving rail",
                 "value": pace, "verdict": _judge(pace, lambda v: v >= GRAY_PACE_GOAL)})
    rows.append(_at_most("gray-share-back", f"gray rail: heal -> rail carrying its share <= {SHARE_BACK_GOAL_S:.0f} s",
                         gray_m.get("share_back_after_restore_s"), SHARE_BACK_GOAL_S))
    return rows


def _ok_metrics(series: Optional[dict]) -> dict:
    """A series' metrics when it ran and survived; {} otherwise (its goals are INCOMPLETE)."""
    m = series.get("metrics") if series else None
    return m if m and not m.get("failed") else {}


def _at_most(goal_id: str, text: str, value: Optional[float], limit: float) -> dict:
    return {"id": goal_id, "text": text, "value": value, "verdict": _judge(value, lambda v: v <= limit)}


def chaos_goals_text(chaos: dict) -> str:
    rows = []
    for g in evaluate_faults(chaos):
        v = g["value"]
        shown = ("n/a" if v is None else f"{v:.3f}" if g["id"] in ("hole-throughput", "gray-pace")
                 else str(v) if g["id"] == "hole-no-readmit" else f"{v * 1e3:.0f} ms")
        rows.append(f"  {g['verdict']:10s} {g['text']}: {shown}")
    faults = ["goals (black hole and gray rail):", *rows]
    rows = []
    for g in evaluate_chaos(chaos):
        v = g["value"]
        shown = "n/a" if v is None else f"{v:.3f}" if g["id"] == "chaos-throughput" else f"{v * 1e3:.0f} ms"
        rows.append(f"  {g['verdict']:10s} {g['text']}: {shown}")
    return "\n".join(["goals (rail cut and restore):", *rows, *faults])
