"""Issue 4's chaos goals, judged from one chaos run's series (each measured in the same run):
the stall of the operation in flight, Nezha's throughput while the rail is down against the
surviving rail alone (Gloo bound to it, the control series), and the time from the restore to the
cut rail carrying its share again."""

from typing import Optional

from .goals import INCOMPLETE, MISS, PASS

NEZHA, SURVIVOR = "nezha-adaptive", "gloo-best-rail"
STALL_GOAL_S, STALL_AIM_S = 0.200, 0.050
THROUGHPUT_GOAL = 0.95
SHARE_BACK_GOAL_S = 2.0


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


def chaos_goals_text(chaos: dict) -> str:
    rows = []
    for g in evaluate_chaos(chaos):
        v = g["value"]
        shown = "n/a" if v is None else f"{v:.3f}" if g["id"] == "chaos-throughput" else f"{v * 1e3:.0f} ms"
        rows.append(f"  {g['verdict']:10s} {g['text']}: {shown}")
    return "\n".join(["goals (issue 4):", *rows])
