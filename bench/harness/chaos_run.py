"""Running the chaos scenario on the bed: heterogeneous rails, each series loops on one size while
a timer cuts the slow rail of one rank and later restores it. Series whose tool has no loop mode
(a nezha-bench without `--loop-seconds/--trace`) are reported as not run."""

import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from .ceiling import ceiling_algbw_gbps
from .chaos import Timeline, analyze, analyze_fallback, validate_trace
from .config import Scenario
from .launch import run_ranks
from .runner import RunContext, log
from .series import SeriesSpec, sweep_args
from .sizes import Band

# Gloo's default is 30 s; 10 s lets the failure land inside the cut window of a 30 s loop.
CHAOS_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class ChaosSeries:
    name: str
    label: str
    tool: str  # nezha | gloo
    iface_rail: str = "best"  # gloo: "best" or "cut" (bound to the rail that is cut)
    mptcp: bool = False
    policy: str = ""


CHAOS_SERIES = (
    ChaosSeries("nezha-adaptive", "Nezha adaptive", "nezha", policy="adaptive"),
    ChaosSeries("gloo-cut-rail", "Gloo on the rail that is cut", "gloo", iface_rail="cut"),
    ChaosSeries("gloo-best-rail", "Gloo on the other rail (control)", "gloo", iface_rail="best"),
    ChaosSeries("gloo-mptcp", "Gloo over MPTCP (all rails)", "gloo", mptcp=True),
)


def supports_loop(tool: str) -> bool:
    try:
        p = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--loop-seconds" in (p.stdout + p.stderr)


def _argv(ctx: RunContext, cs: ChaosSeries, scen: Scenario, cut_rail: int, tl: Timeline, trace: str,
          store: str):
    tool = ctx.tun.nezha_bench if cs.tool == "nezha" else ctx.tun.gloo_bench
    band = Band(tl.bytes, tl.bytes, 0, 1)
    common = [tool, *sweep_args(band, 0, os.path.join(os.path.dirname(trace), "unused.json"), False),
              "--loop-seconds", str(tl.loop_seconds), "--trace", trace]

    def argv(rank: int) -> list[str]:
        if cs.tool == "nezha":
            return common
        rail = cut_rail if cs.iface_rail == "cut" else scen.best_rail()
        a = [*common, "--rank", str(rank), "--world-size", str(ctx.tun.ranks), "--iface", f"r{rail}",
             "--rail-name", f"mptcp(r{rail}+)" if cs.mptcp else f"r{rail}", "--store-dir", store,
             "--timeout-ms", str(CHAOS_TIMEOUT_MS)]
        return ["mptcpize", "run", *a] if cs.mptcp else a

    return tool, argv


# nezha-bench's rail I/O timeout during the chaos run: the same 10 s Gloo gets, so both fail (or
# recover) on the same clock.
NEZHA_CHAOS_IO_TIMEOUT_MS = CHAOS_TIMEOUT_MS


def _nezha_env(scen: Scenario, ctx: RunContext, cs: ChaosSeries) -> dict:
    return {"NEZHA_RAILS": ",".join(f"r{k}=r{k}:tcp" for k in range(len(scen.rates_mbit))),
            "NEZHA_WORLD_SIZE": str(ctx.tun.ranks),
            "NEZHA_RENDEZVOUS": f"{ctx.bed.addr(0, scen.best_rail())}:{ctx.next_port()}",
            "NEZHA_JOB_TOKEN": os.urandom(32).hex(), "NEZHA_POLICY": cs.policy,
            "NEZHA_IO_TIMEOUT_MS": str(NEZHA_CHAOS_IO_TIMEOUT_MS)}


# How each kind of rail failure is made on the bed, and undone. "cut" takes the switch port down
# (carrier lost); "blackhole" drops every packet of the rail inside the host (iptables, carrier
# up); "gray" re-shapes the host's rail to 1/40 of its rate.
FAULT_KINDS = ("cut", "blackhole", "gray")
GRAY_SLOWDOWN = 40


def _fault(ctx: RunContext, kind: str, host: int, rail: int, on: bool) -> None:
    apply_fault(ctx.bed, kind, host, rail, on)


def apply_fault(bed, kind: str, host: int, rail: int, on: bool) -> None:
    """Starts (on) or ends a fault of one host's rail on the bed: a cut (switch port down), a black
    hole (iptables drops everything, carrier stays up) or a gray rail (1/GRAY_SLOWDOWN of its rate)."""
    if kind == "cut":
        (bed.cut if on else bed.restore)(host, rail)
    elif kind == "blackhole":
        op = "-A" if on else "-D"
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            subprocess.run(bed.exec_argv(host, ["iptables", op, chain, flag, f"r{rail}", "-j", "DROP"]),
                           check=on, capture_output=True)
    elif kind == "gray":
        rate = bed.rates_mbit[rail]
        bed.shape(rail, max(rate // GRAY_SLOWDOWN, 1) if on else rate, host=host)
    else:
        raise ValueError(f"unknown fault kind {kind!r}")


def _run_with_cut(ctx: RunContext, argv, env: dict, cut_host: int, cut_rail: int, tl: Timeline, work: str,
                  tag: str, kind: str = "cut"):
    """Launch the ranks; inject the fault at tl.cut_at and heal it at tl.restore_at (seconds after
    the ranks start). Returns (LaunchResult, events with unix times and rail tx snapshots); the
    events keep the names "cut" and "restore" for every kind."""
    events: dict = {}
    timers: list[threading.Timer] = []

    def act(what: str) -> None:
        events[what + "_unix"] = time.time()
        events[what + "_tx"] = ctx.bed.rail_tx_bytes()
        _fault(ctx, kind, cut_host, cut_rail, what == "cut")

    def on_started(_t0: float) -> None:
        events["start_unix"] = time.time()
        events["start_tx"] = ctx.bed.rail_tx_bytes()
        timers.extend([threading.Timer(tl.cut_at, act, ("cut",)), threading.Timer(tl.restore_at, act, ("restore",))])
        for t in timers:
            t.start()

    try:
        res = run_ranks(ctx.bed, ctx.tun.ranks, argv, lambda r: {**env, "NEZHA_RANK": str(r)} if env else {},
                        tl.loop_seconds + 120, work, tag, on_started=on_started)
    finally:
        for t in timers:
            t.cancel()
            if t.is_alive():
                t.join()
        # Whatever happened, the rail must be healed for the next series.
        if "cut_unix" in events and "restore_unix" not in events:
            _fault(ctx, kind, cut_host, cut_rail, False)
    events["end_unix"] = time.time()
    events["end_tx"] = ctx.bed.rail_tx_bytes()
    return res, events


def _relative(events: dict) -> dict:
    return {k: (v - events["start_unix"]) if k.endswith("_unix") else v for k, v in events.items()}


def run_chaos_series(ctx: RunContext, scen: Scenario, cs: ChaosSeries, cut_host: int, cut_rail: int,
                     tl: Timeline, kind: str = "cut") -> dict:
    out = {"name": cs.name, "label": cs.label, "status": "ok", "reason": ""}
    work = tempfile.mkdtemp(prefix=f"chaos-{cs.name}-", dir=ctx.work_dir)
    trace_path = os.path.join(work, "trace.json")
    tool, argv = _argv(ctx, cs, scen, cut_rail, tl, trace_path, work)
    if not os.access(tool, os.X_OK):
        return {**out, "status": "skipped", "reason": f"{tool} not built"}
    env = _nezha_env(scen, ctx, cs) if cs.tool == "nezha" else {}
    if not supports_loop(tool):
        if cs.tool != "nezha":
            return {**out, "status": "skipped", "reason": f"{os.path.basename(tool)} has no loop mode"}
        return run_sweep_fallback(ctx, scen, cs, cut_host, cut_rail, tl, work, env, out)

    res, events = _run_with_cut(ctx, argv, env, cut_host, cut_rail, tl, work, f"{kind}-{cs.name}", kind)
    out.update(seconds=round(res.seconds, 1), exit_codes=res.returncodes, logs=res.logs, argv_rank0=argv(0))
    if not res.ok():
        out["reason"] = res.failure()
    try:
        with open(trace_path) as f:
            trace = json.load(f)
        validate_trace(trace, trace_path)
    except (OSError, ValueError) as e:
        return {**out, "status": "failed", "reason": f"no usable trace from rank 0 ({e}); {out['reason']}"}
    cut_unix = events.get("cut_unix")
    if cut_unix is None:
        return {**out, "status": "failed", "reason": "the ranks ended before the cut", "trace": trace}
    # The loop's own end: the last completion or the failure, not when we noticed.
    last = max([op[0] for op in trace["ops"]] + [trace["error"]["t_unix"] if trace["error"] else 0])
    out["metrics"] = analyze(trace, cut_unix, events.get("restore_unix"), min(last, events["end_unix"]),
                             cut_rail if cs.tool == "nezha" else None)
    out["events"] = _relative(events)
    out["t0_unix"] = events["start_unix"]  # events are seconds after this
    out["trace"] = trace
    m = out["metrics"]
    log(f"  {cs.name:15s} ops {m['ops_total']:4d}  stall {fmt_s(m['stall_s'])}  "
        f"{'FAILED ' + fmt_s(m['failed_after_cut_s']) + ' after cut' if m['failed'] else 'survived'}")
    return out


def run_sweep_fallback(ctx: RunContext, scen: Scenario, cs: ChaosSeries, cut_host: int, cut_rail: int,
                       tl: Timeline, work: str, env: dict, out: dict) -> dict:
    """For a tool without loop mode (nezha-bench today): one size, enough iterations to span the
    loop time at the expected speed, the same cut and restore. Without a per-op trace only the
    outcome is known: survived (with its mean op time) or failed, and when."""
    expected_s = tl.bytes / (ceiling_algbw_gbps(list(scen.rates_mbit), ctx.tun.ranks) * 0.7 * 1e9)
    iters = max(int(tl.loop_seconds / expected_s), 10)
    json_path = os.path.join(work, "sweep.json")
    argv = [ctx.tun.nezha_bench, *sweep_args(Band(tl.bytes, tl.bytes, 1, iters), 1, json_path, True)]
    res, events = _run_with_cut(ctx, lambda _r: argv, env, cut_host, cut_rail, tl, work, cs.name)
    out.update(seconds=round(res.seconds, 1), exit_codes=res.returncodes, logs=res.logs, argv_rank0=argv,
               mode="sweep-fallback (no per-op trace)", events=_relative(events), t0_unix=events["start_unix"])
    mean_us = None
    if res.ok():
        try:
            with open(json_path) as f:
                mean_us = json.load(f)["results"][0]["time_us"]
        except (OSError, ValueError, KeyError, IndexError) as e:
            return {**out, "status": "failed", "reason": f"rank 0 JSON unreadable: {e}"}
    out["metrics"] = analyze_fallback(res.ok(), "cut_unix" in events, events.get("cut_unix"), events["end_unix"],
                                      mean_us, iters, tl.bytes, res.failure() if not res.ok() else None)
    m = out["metrics"]
    log(f"  {cs.name:15s} {iters} iters (no trace)  "
        f"{'FAILED ' + fmt_s(m['failed_after_cut_s']) + ' after cut' if m['failed'] else 'survived'}")
    return out


def fmt_s(v) -> str:
    return "n/a" if v is None else f"{v:.2f}s"


def run_chaos(ctx: RunContext, scen: Scenario, names: list[str] | None, tl: Timeline) -> dict:
    for k, rate in enumerate(scen.rates_mbit):
        ctx.bed.shape(k, rate)
    cut_rail = min(range(len(scen.rates_mbit)), key=lambda k: (scen.rates_mbit[k], k))
    cut_host = 1  # not rank 0: rank 0's trace then shows how a remote failure reaches everyone
    log(f"chaos: rails {'/'.join(map(str, scen.rates_mbit))} Mbit/s, cut r{cut_rail} of host {cut_host} at "
        f"{tl.cut_at:.0f}s, restore at {tl.restore_at:.0f}s, loop {tl.loop_seconds}s of {tl.bytes} B allreduce")
    out = {"scenario": scen.name, "rates_mbit": list(scen.rates_mbit), "cut_host": cut_host, "cut_rail": cut_rail,
           "timeline": tl.__dict__, "gloo_timeout_ms": CHAOS_TIMEOUT_MS, "series": {}}
    for cs in CHAOS_SERIES:
        if names and cs.name not in names:
            continue
        out["series"][cs.name] = run_chaos_series(ctx, scen, cs, cut_host, cut_rail, tl)
    # Failures the carrier does not show (a black hole, a gray rail; bench/README.md, "Chaos
    # scenario"): Nezha and the surviving-rail control, each side by side in this run.
    out["faults"] = {}
    for kind in FAULT_KINDS[1:]:
        log(f"chaos: {kind} on r{cut_rail} of host {cut_host} from {tl.cut_at:.0f}s to {tl.restore_at:.0f}s")
        series = {}
        for cs in CHAOS_SERIES:
            if cs.name not in ("nezha-adaptive", "gloo-best-rail") or (names and cs.name not in names):
                continue
            series[cs.name] = run_chaos_series(ctx, scen, cs, cut_host, cut_rail, tl, kind)
        out["faults"][kind] = {"series": series}
    return out
