"""The scale runs of the simulator: 2 to 1,024 ranks on the fitted rails, as plain alpha-beta
links (the test bed's TBF token bucket is a property of its shaper, not of a NIC at scale) with
the step latency of the fewest-ranks test-bed run (fit["alpha_scale"]).

  threshold  per N: the smallest size from which the split beats the best single rail at every
             larger size (simulated, learned ratios), next to the runtime's own autoColdThreshold
             computed from its probe at that N
  gain       per N and size: best single rail / Nezha adaptive (threshold rule, learned split)
  agreement  the per-operation round at each N (dissemination: the runtime; all-to-all: the earlier runtime; tree, epoch):
             time, messages and bytes per rank; a 1 KiB operation with and without round-free
             small operations (one round per 16)
  failover   a 64 MiB hot operation losing a rail half way (link down, black hole, or gray: 40x
             slower), at 16, 128 and 1,024 ranks, all-to-all / tree / dissemination rounds
  liveness   heartbeat traffic per rank per second (neighbours + flooded verdict: the runtime since
             all-to-all: the earlier runtime) and a host losing every rail: when every peer knows
             (liveness.py)
  waves      a restored rail re-entering mid-operation on the test bed's rails (against the
             measured share back), and what a round per wave costs at 1,024 ranks (waves.py)
  split      the learned share of the slower rail per N (Nezha v2 Fig. 11's quantity)
"""

import glob
import json
import os
import statistics

from . import control, liveness, waves
from .failover import run_failover
from .fit import policy_for
from .op import ROUND_FIELDS, learn_ratios, run_op
from .roundfree import loop_seconds

RANKS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GAIN_RANKS = (4, 8, 64, 1024)
FAILOVER_RANKS = (16, 128, 1024)
FAILOVER_SCHEMES = ("all-to-all", "tree", "dissemination")
TRAFFIC_RANKS = tuple(sorted(RANKS + (1000,)))  # and one N that is no power of two
TRAFFIC_SCHEMES = ("all-to-all", "tree", "dissemination")
CUT_RANKS = (2, 16, 128, 1024)
WAVE_RANKS = (128, 1024)
RESTORE_PHASES = 8  # restore instants spread over one operation on the survivors
SCENARIOS = {"homogeneous 500/500": (500, 500), "heterogeneous 800/300": (800, 300)}
# 32 KiB .. 16 MiB in half-octave steps (multiples of 4 bytes: float32 elements)
THRESHOLD_SIZES = tuple(int(2 ** (k / 2)) // 4 * 4 for k in range(30, 49))
GAIN_SIZES = tuple(1 << k for k in range(10, 29, 2))  # 1 KiB .. 256 MiB
UPDATES = 4  # tuner updates per size (gain 0.6: within 3 % of the fixed point)


def _fold_for(n):
    # Ring and power-of-two rd/rhd fold exactly (tests check it); fewer classes, faster runs.
    return 8 if n <= 64 else 2


WHAT_IF_SPLIT_COST = 1.0e-3  # seconds: an assumed per-operation cost of splitting (Nezha v2's
#                               "synchronization penalties and slice metadata"), not measured here


def threshold(fit, rates, n, algo, split_cost=None):
    """Scans down from the largest size while the split keeps winning; the threshold is the
    last size that won (the split wins at it and at every larger size of the grid)."""
    pol = policy_for(rates, n, fit, algo, split_cost, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    sim = None
    for s in reversed(THRESHOLD_SIZES):
        ratios, _ = learn_ratios(pol, s, UPDATES)
        cold = run_op(pol, s, force="cold").seconds
        hot = run_op(pol, s, ratios, force="hot")
        if not (hot.hot and hot.seconds < cold):
            break
        sim = s
    return {"simulated": sim, "runtime_auto": pol.threshold}


def gain(fit, rates, n, algo):
    pol = policy_for(rates, n, fit, algo, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    out = []
    for s in GAIN_SIZES:
        single = run_op(pol, s, force="cold").seconds
        ratios = learn_ratios(pol, s, UPDATES)[0] if s >= pol.threshold else None
        out.append(single / run_op(pol, s, ratios).seconds)
    return out


def agreement(fit, n):
    pol = policy_for((500, 500), n, fit, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    per_op = {scheme: control.round_seconds(pol.links, 0, n, ROUND_FIELDS * 2, scheme, changed=False, fold=pol.fold)
              for scheme in control.SCHEMES}
    none = run_op(pol, 1024, scheme="epoch").seconds
    small = {scheme: run_op(pol, 1024, scheme=scheme).seconds / none for scheme in control.SCHEMES}
    for scheme in ("all-to-all", "dissemination"):  # with round-free small operations (runtime: dissemination)
        small[f"{scheme}, round-free"] = loop_seconds(pol, 1024, scheme)[0] / none
    return per_op, small


def agreement_traffic(fit, n):
    """Per scheme: one round's seconds, messages and bytes one rank sends (2 rails' vectors)."""
    pol_links = policy_for((500, 500), 2, fit, alpha=fit.get("alpha_scale"), bucket=False).links
    out = {}
    for scheme in TRAFFIC_SCHEMES:
        secs, msgs, nbytes = control.round_traffic(pol_links, 0, n, ROUND_FIELDS * 2, scheme, fold=_fold_for(n))
        out[scheme] = {"seconds": secs, "messages": msgs, "bytes": nbytes}
    return out


def heartbeats(fit, n):
    links = policy_for((500, 500), 2, fit, alpha=fit.get("alpha_scale"), bucket=False).links
    return {scheme: liveness.heartbeat_load(links, n, scheme) for scheme in liveness.SCHEMES}


def host_cut(fit, n):
    links = policy_for((500, 500), 2, fit, alpha=fit.get("alpha_scale"), bucket=False).links
    out = {scheme: liveness.host_cut_sweep(links, n, scheme) for scheme in liveness.SCHEMES}
    off = liveness.without_heartbeats()
    out["off"] = {"max_s": off, "median_s": off, "min_s": off, "verdict_messages": 0, "verdict_messages_per_rank": 0}
    return out


def restore_on_the_bed(fit):
    """The failure-timing benchmark's restore case in the simulator: 2 ranks, 800/300 Mbit/s
    (fitted TBF rails), a loop of 64 MiB allreduces, r1 restored at RESTORE_PHASES instants
    over one operation; share back with waves and without."""
    pol = policy_for((800, 300), 2, fit)
    op, _ = waves.op_with_rail_out(pol, 64 << 20, 1, 0)
    out = {"op_while_cut_s": op, "rebuild_s": waves.rebuild_time(pol, 1)}
    for label, wb in (("waves", waves.WAVE_BYTES), ("off", 0)):
        # instants spread by the golden ratio: not in step with the waves (an eighth of an operation each)
        got = [waves.run_restore(pol, 64 << 20, 1, 2 * op + (k * 0.6180339887498949 % 1.0) * op, wb).share_back
               for k in range(RESTORE_PHASES)]
        out[label] = {"mean_s": statistics.mean(got), "max_s": max(got), "min_s": min(got)}
    return out


def wave_cost(fit, n):
    """A 64 MiB operation while one of two 500 Mbit/s rails is out: seconds without waves and
    with (a round after every 8 MiB wave), per round scheme."""
    pol = policy_for((500, 500), n, fit, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    out = {}
    for scheme in ("all-to-all", "dissemination"):
        plain, _ = waves.op_with_rail_out(pol, 64 << 20, 1, 0, scheme)
        waved, rounds = waves.op_with_rail_out(pol, 64 << 20, 1, waves.WAVE_BYTES, scheme)
        out[scheme] = {"plain_s": plain, "waves_s": waved, "rounds": rounds}
    return out


def measured_failover_timing(results_dir):
    """The newest failure-timing run (bench/run_failover_timing.py) under results_dir: its
    latest-failover-timing.json, else the newest stamped run there or in issue18-perf/ (the
    committed measurement): {"path", "all_down_peer_s", "share_back_s"} per configuration, or None."""
    latest = os.path.join(results_dir, "latest-failover-timing.json")
    if os.path.exists(latest):
        paths = [latest]
    else:
        paths = sorted(glob.glob(os.path.join(results_dir, "failover-timing-*.json")) +
                       glob.glob(os.path.join(results_dir, "issue18-perf", "failover-timing-*.json")),
                       key=os.path.basename)
    if not paths:
        return None
    with open(paths[-1]) as f:
        d = json.load(f)
    out = {"path": paths[-1]}
    for cfg, r in d.get("results", {}).items():
        out[cfg] = {"all_down_peer_s": [max(x["per_rank_s"]) for x in r.get("all_down", []) if x.get("per_rank_s")],
                    "share_back_s": [x["share_back_s"] for x in r.get("restore", []) if x.get("share_back_s") is not None]}
    return out


def failover(fit, n, kind, scheme):
    pol = policy_for((500, 500), n, fit, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    s = 64 << 20
    ratios = [0.5, 0.5]
    healthy = run_op(pol, s, ratios, scheme=scheme).seconds
    r = run_failover(pol, s, ratios, fail_rail=1, fail_frac=0.5, kind=kind, scheme=scheme, healthy_seconds=healthy)
    return r


def split_share(fit, n, size):
    pol = policy_for((800, 300), n, fit, alpha=fit.get("alpha_scale"), bucket=False, fold=_fold_for(n))
    return learn_ratios(pol, size, 6)[0][1]


def run_all(fit, log=print):
    res = {"threshold": {}, "gain": {}, "agreement_per_op": {}, "small_op_over_no_round": {}, "failover": {},
           "split_share_300": {}, "agreement_traffic": {}, "heartbeats": {}, "host_cut": {}, "wave_cost": {}}
    for label, rates in SCENARIOS.items():
        for algo in ("runtime", "best"):
            key = f"{label}, {algo} algorithms"
            res["threshold"][key] = {n: threshold(fit, rates, n, algo) for n in RANKS}
            log(f"threshold {key}: " + ", ".join(f"N={n} {v['simulated']}" for n, v in res["threshold"][key].items()))
            for n in GAIN_RANKS:
                res["gain"][f"{key}, N={n}"] = gain(fit, rates, n, algo)
            log(f"gain {key} done")
    key = f"homogeneous 500/500, runtime algorithms, what-if split cost {WHAT_IF_SPLIT_COST * 1e3:.1f} ms"
    res["threshold"][key] = {n: threshold(fit, (500, 500), n, "runtime", WHAT_IF_SPLIT_COST) for n in RANKS}
    log(f"threshold {key}: " + ", ".join(f"N={n} {v['simulated']}" for n, v in res["threshold"][key].items()))
    for n in RANKS:
        per_op, small = agreement(fit, n)
        res["agreement_per_op"][n] = per_op
        res["small_op_over_no_round"][n] = small
    for n in TRAFFIC_RANKS:
        res["agreement_traffic"][n] = agreement_traffic(fit, n)
    log("agreement done")
    for n in RANKS:
        res["heartbeats"][n] = heartbeats(fit, n)
    for n in CUT_RANKS:
        res["host_cut"][n] = host_cut(fit, n)
    log("heartbeats and host cut done")
    res["restore_bed"] = restore_on_the_bed(fit)
    for n in WAVE_RANKS:
        res["wave_cost"][n] = wave_cost(fit, n)
    log("waves done")
    for n in FAILOVER_RANKS:
        for kind in ("link event", "black hole", "gray"):
            for scheme in FAILOVER_SCHEMES:
                r = run_failover_dict(failover(fit, n, kind, scheme))
                res["failover"][f"N={n}, {kind}, {scheme}"] = r
    log("failover done")
    for size in (1 << 20, 64 << 20):
        res["split_share_300"][size] = {n: split_share(fit, n, size) for n in (2, 4, 8, 64, 1024)}
    return res


def run_failover_dict(r):
    return {"healthy_s": r.healthy_seconds, "total_s": r.seconds, "stall_s": r.seconds - r.healthy_seconds,
            "fail_at_s": r.fail_at, "detected_at_s": r.detected_at, "attempt_end_s": r.attempt_end,
            "agree_round_s": r.agree_round, "retire_round_s": r.retire_round, "replay_s": r.replay,
            "replay_round_s": r.replay_round, "lost_bytes": r.lost_units * 4, "replayed_bytes": r.replayed_units * 4,
            "control_bytes_per_rank": r.control_bytes}
