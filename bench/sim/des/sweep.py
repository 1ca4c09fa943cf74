"""The scale runs of the simulator: 2 to 1,024 ranks on the fitted rails, as plain alpha-beta
links (the test bed's TBF token bucket is a property of its shaper, not of a NIC at scale) with
the step latency of the fewest-ranks test-bed run (fit["alpha_scale"]).

  threshold  per N: the smallest size from which the split beats the best single rail at every
             larger size (simulated, learned ratios), next to the runtime's own autoColdThreshold
             computed from its probe at that N
  gain       per N and size: best single rail / Nezha adaptive (threshold rule, learned split)
  agreement  the per-operation round at each N (all-to-all today, tree, epoch)
  failover   a 64 MiB hot operation losing a rail half way (link down, black hole, or gray: 40x
             slower), at 16, 128 and 1,024 ranks
  split      the learned share of the slower rail per N (Nezha v2 Fig. 11's quantity)
"""

from . import control
from .failover import run_failover
from .fit import policy_for
from .op import ROUND_FIELDS, learn_ratios, run_op

RANKS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GAIN_RANKS = (4, 8, 64, 1024)
FAILOVER_RANKS = (16, 128, 1024)
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
    small = {scheme: run_op(pol, 1024, scheme=scheme).seconds / run_op(pol, 1024, scheme="epoch").seconds
             for scheme in control.SCHEMES}
    return per_op, small


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
           "split_share_300": {}}
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
    log("agreement done")
    for n in FAILOVER_RANKS:
        for kind in ("link event", "black hole", "gray"):
            for scheme in ("all-to-all", "tree"):
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
