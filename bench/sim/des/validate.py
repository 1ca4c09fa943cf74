"""Simulated vs measured: every point of the nezha-adaptive and nezha-single series of a suite
result (or of measure.py's sweep), at the ranks and rail rates it was measured with."""

import statistics

from . import launch
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
    latency at the rank counts it names. Each point is simulated twice: in its benchmark launch
    replayed operation by operation (launch.py: probe, warmup, tuner updates, token buckets
    carried over; "sim_s"), and as one operation of a steady loop with the tuner's fixed point
    (op.run_op, learn_ratios; "steady_s", the model before the replay). Points no recorded
    launch covers get the steady value in both."""
    rows = []
    for sc in result["scenarios"]:
        n = sc.get("ranks") or result["ranks"]
        pol = policy_for(sc["rates_mbit"], n, fit, alpha=(alpha_by_ranks or {}).get(n))
        learned = {}
        for name in ("nezha-adaptive", "nezha-single"):
            pts = series(sc, name)
            replayed = {}
            for lo, hi, warmup, iters in launch.launches(sc, name):
                sizes = [s for s, _ in pts if lo <= s <= hi]
                if sizes:
                    mode = "single" if name == "nezha-single" else "adaptive"
                    replayed.update(launch.replay(pol, sizes, warmup, iters, mode))
            for s, t in pts:
                if name == "nezha-single":
                    steady = run_op(pol, s, force="cold")
                else:
                    if s >= pol.threshold and s not in learned:
                        learned[s] = learn_ratios(pol, s, 5)[0]
                    steady = run_op(pol, s, learned.get(s))
                run = replayed.get(s)
                sim_s = run.mean_timed if run else steady.seconds
                sim_hot = run.hot[-1] if run else steady.hot
                rows.append({"source": source, "scenario": sc["name"], "rates_mbit": sc["rates_mbit"], "ranks": n,
                             "series": name, "bytes": s, "measured_s": t, "sim_s": sim_s, "sim_hot": sim_hot,
                             "measured_hot": _measured_hot(sc, name, s), "sim_over_measured": sim_s / t,
                             "steady_s": steady.seconds, "steady_hot": steady.hot,
                             "steady_over_measured": steady.seconds / t,
                             "sim_split": ([r for r in run.ratios[-1]] if run and name == "nezha-adaptive" else None)})
    return rows


def _measured_hot(sc, name, nbytes):
    for p in sc["series"].get(name, {}).get("results", []):
        if p["bytes"] == nbytes and "hot" in p:
            return bool(p["hot"])
    return None


def summarize(rows, key="sim_over_measured"):
    """Median and max |simulated / measured - 1| per source, ranks, series and size band; key
    "steady_over_measured" gives the same for the steady-state model."""
    out = []
    keys = sorted({(r["source"], r["ranks"], r["series"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    for src, n, name in keys:
        for band, lo, hi in BANDS:
            errs = [abs(r[key] - 1) for r in rows
                    if (r["source"], r["ranks"], r["series"]) == (src, n, name) and lo <= r["bytes"] <= hi]
            if errs:
                med = statistics.median(errs)
                out.append({"source": src, "ranks": n, "series": name, "band": band, "points": len(errs),
                            "median_abs_error": med, "max_abs_error": max(errs), "accepted": ACCEPTED[band],
                            "pass": med <= ACCEPTED[band]})
    return out


def measured_split_sizes(result):
    """Per rank count of a measured sweep: the sizes the runtime's adaptive series ran split
    (hot) and single / adaptive at each, the smallest size from which it ran split at every
    larger size, and the spread of single / adaptive where both ran the same one-rail plan (the
    launch-to-launch noise a win must clear)."""
    out = {}
    for sc in result["scenarios"]:
        n = sc.get("ranks") or result["ranks"]
        ada = {p["bytes"]: p for p in sc["series"].get("nezha-adaptive", {}).get("results", []) if p.get("time_us")}
        one = {p["bytes"]: p["time_us"] for p in sc["series"].get("nezha-single", {}).get("results", [])
               if p.get("time_us")}
        sizes = sorted(s for s in ada if s in one)
        if not sizes:
            continue
        gain = {s: one[s] / ada[s]["time_us"] for s in sizes}
        hot = [s for s in sizes if ada[s].get("hot")]
        first = None
        for s in reversed(sizes):
            if not ada[s].get("hot"):
                break
            first = s
        same = [abs(gain[s] - 1) for s in sizes if not ada[s].get("hot")]
        rates = sc["rates_mbit"]
        slow = min(range(len(rates)), key=lambda i: (rates[i], -i))
        share = {}
        for s in hot:
            rb = ada[s].get("rail_bytes") or {}
            if sum(rb.values()):
                share[s] = rb.get(f"r{slow}", 0) / sum(rb.values())
        out[n] = {"hot_sizes": hot, "first_split": first, "gain": gain, "slow_share": share,
                  "same_plan_spread": max(same) if same else None}
    return out
