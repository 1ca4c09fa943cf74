"""Per-rail alpha-beta parameters fitted to the benchmark suite's own results.

Source: a suite result (bench/results/latest.json, `make bench`: 4 ranks on the TBF-shaped test
bed, some scenarios at 2; each is fitted at its own rank count) — its "nezha-single" series (every operation whole on the best rail) in each scenario. Each
series is fitted as T(S) = c + b*S by least squares on relative error; with the ring's terms at N
ranks, b = 2(N-1)/N * beta and c = 2(N-1)*alpha + agreement(N), the agreement being the
runtime's all-to-all control round (alpha + (N-1)*per_message, per_message assumed, see
DEFAULT_PER_MESSAGE). beta is turned into a per-rail efficiency (bytes moved / bytes the TBF rate
allows) so a rail of any rate gets beta = 8 / (rate * efficiency).
"""

import json

import numpy as np

from .model import Agreement, Rail, algorithm_terms

# CPU a rank spends per control message (framing, a send syscall): not measurable from the suite's
# series alone (it folds into the intercept), so assumed; run_sim.py --per-message overrides it.
DEFAULT_PER_MESSAGE = 10e-6


def fit_line(sizes, times):
    """(c, b) minimising sum(((c + b*s) - t) / t)^2."""
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(s) < 2 or np.any(t <= 0):
        raise ValueError("need at least two sizes with positive times")
    w = 1.0 / t
    a = np.stack([w, w * s], axis=1)
    (c, b), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(c), float(b)


def series_times(scenario, series):
    res = scenario["series"][series]["results"]
    pts = [(r["bytes"], r["time_us"] * 1e-6) for r in res if r.get("time_us")]
    if not pts:
        raise ValueError(f"scenario {scenario['name']}: series {series} has no times")
    return [p[0] for p in pts], [p[1] for p in pts]


def fit_suite(result, per_message=DEFAULT_PER_MESSAGE):
    """Fit the suite result: returns a dict with alpha, efficiency, per_message, split cost, notes."""
    n = result["ranks"]
    alphas, effs, ranks = [], [], set()
    for sc in result["scenarios"]:
        if "nezha-single" not in sc["series"]:
            continue
        n = sc.get("ranks") or result["ranks"]  # a suite may run some scenarios at other rank counts
        ranks.add(n)
        a_ring, b_ring = algorithm_terms("ring", n)
        sizes, times = series_times(sc, "nezha-single")
        c, b = fit_line(sizes, times)
        beta = b / b_ring
        rate = sc["rates_mbit"][sc["best_rail"]] * 1e6 / 8  # bytes/s the TBF allows
        effs.append((1.0 / beta) / rate)
        # c = a_ring*alpha + (alpha + (n-1)*per_message)
        alphas.append(max(0.0, (c - (n - 1) * per_message) / (a_ring + 1)))
    if not effs:
        raise ValueError("the suite result has no nezha-single series to fit")
    return {
        "ranks": result["ranks"],
        "ranks_fitted": sorted(ranks),
        "alpha": float(np.mean(alphas)),
        "efficiency": float(np.mean(effs)),
        "per_message": per_message,
        "source": f"{result.get('mode', '?')} suite run started {result.get('started', '?')}, "
                  f"{' and '.join(str(k) for k in sorted(ranks))} ranks",
    }


def rails_for(rates_mbit, fit):
    """Rails of these TBF rates with the fitted alpha and efficiency."""
    return tuple(Rail(f"r{i}", fit["alpha"], 8.0 / (rate * 1e6 * fit["efficiency"])) for i, rate in enumerate(rates_mbit))


def agreement_for(scheme, fit):
    return Agreement(scheme, fit["alpha"], fit["per_message"])


def load(path):
    with open(path) as f:
        return json.load(f)
