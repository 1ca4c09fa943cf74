"""Simulated vs measured: every point of the nezha-adaptive and nezha-single series of a suite
result (or of measure.py's sweep), at the ranks and rail rates it was measured with."""

import statistics

from .fit import policy_for, series
from .op import learn_ratios, run_op

BANDS = (("small (<= 64 KiB)", 0, 64 << 10), ("medium (128 KiB - 1 MiB)", 128 << 10, 1 << 20),
         ("large (>= 2 MiB)", 2 << 20, 1 << 62))
# Accepted error, |simulated/measured - 1| (median per band): small operations are a few hundred
# microseconds on TBF-shaped veths, where scheduling jitter on a shared 2-core machine is as
# large as the signal; larger ones are set by the rails' bandwidth, which the fit pins down.
ACCEPTED = {"small (<= 64 KiB)": 0.35, "medium (128 KiB - 1 MiB)": 0.20, "large (>= 2 MiB)": 0.15}


def predict(result, fit, source, alpha_by_ranks=None):
    """Simulated vs measured points; alpha_by_ranks ({ranks: seconds}) overrides the per-step
    latency at the rank counts it names."""
    rows = []
    for sc in result["scenarios"]:
        n = sc.get("ranks") or result["ranks"]
        pol = policy_for(sc["rates_mbit"], n, fit, alpha=(alpha_by_ranks or {}).get(n))
        learned = {}
        for name in ("nezha-adaptive", "nezha-single"):
            for s, t in series(sc, name):
                if name == "nezha-single":
                    sim = run_op(pol, s, force="cold")
                else:
                    if s >= pol.threshold and s not in learned:
                        learned[s] = learn_ratios(pol, s, 5)[0]
                    sim = run_op(pol, s, learned.get(s))
                rows.append({"source": source, "scenario": sc["name"], "rates_mbit": sc["rates_mbit"], "ranks": n,
                             "series": name, "bytes": s, "measured_s": t, "sim_s": sim.seconds,
                             "sim_hot": sim.hot, "sim_over_measured": sim.seconds / t})
    return rows


def summarize(rows):
    out = []
    keys = sorted({(r["source"], r["ranks"], r["series"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    for src, n, name in keys:
        for band, lo, hi in BANDS:
            errs = [abs(r["sim_over_measured"] - 1) for r in rows
                    if (r["source"], r["ranks"], r["series"]) == (src, n, name) and lo <= r["bytes"] <= hi]
            if errs:
                med = statistics.median(errs)
                out.append({"source": src, "ranks": n, "series": name, "band": band, "points": len(errs),
                            "median_abs_error": med, "max_abs_error": max(errs), "accepted": ACCEPTED[band],
                            "pass": med <= ACCEPTED[band]})
    return out
