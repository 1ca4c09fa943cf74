#!/usr/bin/env python3
"""The discrete-event simulator's prediction of the test bed's scale run (make bench-scale-runtime,
runtime/tests/testbed/run_scale.sh), written BEFORE that run is measured (bench/README.md,
"Scale as measured"): the commit that adds the prediction comes before the one that adds the
measurement.

    /usr/bin/python3 -m bench.sim.scale_predict [--suite bench/results/latest.json]
        [--simval bench/results/latest-simval.json] [--out bench/results] [--readme bench/README.md]

The layout it predicts is the scenario's: N ranks (8, 16, 32, 64) as RANKS_PER_HOST processes on
each of N / RANKS_PER_HOST bed hosts, two rails of RAIL_MBIT Mbit/s per host (TBF). Per N:

  small    a 1 KiB allreduce in a loop (round-free small operations: one round per 16)
  large    a 4 MiB allreduce with learned ratios: time, algbw, busbw (2 (N-1)/N of algbw)
  failover one host's rail cut under a 4 MiB hot allreduce (netlink link event): cut -> every
           rank agreed (detection + agreement round + retire round, dissemination scheme)

Two modelling choices (bench/README.md, "Scale as measured", says why):
- every rank has its own link at the host's rail rate: exact for the ring's host-crossing edges
  (ranks are numbered host-major, so one ring edge per host crosses the wire), pessimistic for
  steps between ranks of one host (loopback on the bed, priced here as wire steps);
- the per-step latency at N is the power law through the bed sweep's fitted latencies at 2, 4 and
  8 ranks (fit.fit_alpha_by_ranks: every rank is a process on the same 2 cores, so a hop's
  latency grows with ranks per core), extrapolated to 16-64. That extrapolation is the
  prediction's weakest part and the measurement checks it.
"""

import argparse
import datetime
import functools
import json
import math
import os

from ..harness.readme_block import rewrite_block
from ..harness.results import DEFAULT_DIR, write_result
from .des import fit as fitmod
from .des.failover import run_failover
from .des.op import learn_ratios, run_op
from .des.roundfree import loop_seconds

RANKS = (8, 16, 32, 64)
RANKS_PER_HOST = 4
RAIL_MBIT = (50, 50)
SMALL_BYTES = 1 << 10
LARGE_BYTES = 4 << 20
SCHEME = "dissemination"  # the runtime's agreement round (bench/README.md, simulator section)
KIND = "scale-prediction"


def alpha_power_law(alpha_by_ranks):
    """(a2, exponent): alpha(N) = a2 * (N / 2) ** exponent, least squares in log-log space."""
    pts = sorted(alpha_by_ranks.items())
    if len(pts) < 2:
        raise ValueError(f"alpha_by_ranks: need at least 2 rank counts to extrapolate, got {pts}")
    xs = [math.log(n / 2) for n, _ in pts]
    ys = [math.log(a) for _, a in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - slope * mx), slope


def alpha_at(law, n):
    a2, k = law
    return a2 * (n / 2) ** k


def predict_n(fit, n, alpha):
    pol = fitmod.policy_for(RAIL_MBIT, n, fit, alpha=alpha, bucket=True)
    small_s, _ = loop_seconds(pol, SMALL_BYTES, SCHEME)
    ratios, _ = learn_ratios(pol, LARGE_BYTES, 4, scheme=SCHEME)
    large = run_op(pol, LARGE_BYTES, ratios, scheme=SCHEME)
    algbw = LARGE_BYTES / large.seconds
    hot = [0.5, 0.5]
    healthy = run_op(pol, LARGE_BYTES, hot, scheme=SCHEME, force="hot").seconds
    fo = run_failover(pol, LARGE_BYTES, hot, fail_rail=1, fail_frac=0.5, kind="link event", scheme=SCHEME,
                      healthy_seconds=healthy)
    agreed = (fo.detected_at - fo.fail_at) + fo.agree_round + fo.retire_round
    return {"ranks": n, "hosts": n // RANKS_PER_HOST, "alpha_s": alpha,
            "allreduce_1k_s": small_s,
            "allreduce_4m_s": large.seconds, "allreduce_4m_algbw_Bps": algbw,
            "allreduce_4m_busbw_Bps": algbw * 2 * (n - 1) / n, "allreduce_4m_ratios": list(ratios),
            "failover_agreed_s": agreed, "failover_agree_round_s": fo.agree_round,
            "failover_retire_round_s": fo.retire_round}


@functools.lru_cache(maxsize=2)
def _suite_fit(suite_path):
    with open(suite_path) as f:
        return fitmod.fit_suite(json.load(f))


def failover_recorded_posthoc(pred, n, nbytes, suite_path):
    """Written AFTER the first measurement, and labelled so wherever it is shown: the quantity the
    scale run measures for a cut (rank 0 records the failover once the attempt's agreement round
    ends: cut -> the surviving rail's chunks done -> agreement), on the cut loop's own operation
    (nbytes, split 50/50), with the prediction's latency law. The prediction above priced
    detection + agreement + retire rounds on a 4 MiB operation, leaving out the wait for the
    surviving rail's chunks, which dominates on these rails."""
    fit = _suite_fit(suite_path)
    law = (pred["alpha_law"]["a2_s"], pred["alpha_law"]["exponent"])
    pol = fitmod.policy_for(tuple(pred["rail_mbit"]), n, fit, alpha=alpha_at(law, n), bucket=True)
    fo = run_failover(pol, nbytes, [0.5, 0.5], fail_rail=1, fail_frac=0.5, kind="link event", scheme=SCHEME)
    return (fo.attempt_end - fo.fail_at) + fo.agree_round


def report(pred):
    L = [f"Prediction (discrete-event simulator, {pred['made_utc']}, before the measurement): "
         f"{RANKS_PER_HOST} ranks per bed host, two rails of {'/'.join(map(str, RAIL_MBIT))} Mbit/s per host; "
         f"per-step latency alpha(N) = {pred['alpha_law']['a2_s'] * 1e6:.0f} us x (N/2)^{pred['alpha_law']['exponent']:.2f} "
         f"(power law through the bed sweep's fitted {', '.join(f'N={n} {a * 1e6:.0f} us' for n, a in sorted(pred['alpha_by_ranks'].items()))}).",
         "",
         "| ranks | hosts | alpha | 1 KiB allreduce | 4 MiB allreduce | busbw (MB/s) | failover agreed |",
         "|---|---|---|---|---|---|---|"]
    for r in pred["points"]:
        L.append(f"| {r['ranks']} | {r['hosts']} | {r['alpha_s'] * 1e6:.0f} us | {r['allreduce_1k_s'] * 1e3:.2f} ms | "
                 f"{r['allreduce_4m_s'] * 1e3:.0f} ms | {r['allreduce_4m_busbw_Bps'] / 1e6:.2f} | "
                 f"{r['failover_agreed_s'] * 1e3:.1f} ms |")
    return "\n".join(L) + "\n"


def predict(suite_path, simval_path):
    with open(suite_path) as f:
        fit = fitmod.fit_suite(json.load(f))
    with open(simval_path) as f:
        by_ranks = fitmod.fit_alpha_by_ranks(json.load(f), fit)
    law = alpha_power_law(by_ranks)
    points = [predict_n(fit, n, alpha_at(law, n)) for n in RANKS]
    return {"made_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "suite": suite_path, "simval": simval_path, "ranks_per_host": RANKS_PER_HOST, "rail_mbit": list(RAIL_MBIT),
            "alpha_by_ranks": {int(n): a for n, a in by_ranks.items()},
            "alpha_law": {"a2_s": law[0], "exponent": law[1]}, "points": points}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=os.path.join(DEFAULT_DIR, "latest.json"))
    ap.add_argument("--simval", default=os.path.join(DEFAULT_DIR, "latest-simval.json"))
    ap.add_argument("--out", default=DEFAULT_DIR)
    ap.add_argument("--readme", default=os.path.join(os.path.dirname(DEFAULT_DIR), "README.md"),
                    help="README whose scale-prediction block is rewritten ('' for none)")
    a = ap.parse_args(argv)
    pred = predict(a.suite, a.simval)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = report(pred)
    write_result(a.out, KIND, stamp, {".json": pred, ".md": text})
    if a.readme:
        rewrite_block(a.readme, KIND, "bench/sim/scale_predict.py", text)
    print(text)


if __name__ == "__main__":
    main()
