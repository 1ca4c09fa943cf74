"""Per-rail alpha-beta parameters from test-bed measurements, fitted through the simulator itself.

Source: a suite result's "nezha-single" series (every operation whole on the best rail, so one
rail alone plus the per-operation agreement round). For each scenario's best rail:
  efficiency  bytes/s the rail really moves over its TBF rate: scaled until the simulated large
              operations (>= 8 MiB) match the measured ones on average
  alpha       one message step's latency: golden-section search minimising the relative error
              of the small operations (<= 64 KiB), where latency dominates
  line        bytes/s while the TBF bucket has tokens (burst = max(2 ms of the rate, 128 KiB),
              hack/testbed.sh): golden-section search on the sizes up to 1 MiB
  gap         sender CPU per message (a syscall and framing): not separable from alpha with
              these series; assumed (GAP), the same for every rail
The veth rails of the test bed differ only in their TBF rate, so rails of other rates get the
mean alpha and efficiency of the fitted ones (beta = 8 / (rate * efficiency)).
Then the per-operation cost of splitting (extra rail threads, waiting for the slower rail) is the
median excess of the measured "nezha-adaptive" hot operations (256 KiB - 4 MiB) over the
simulated ones.
"""

import statistics

from .collective import DEFAULT_FOLD
from .network import Link
from .op import learn_ratios, run_op
from .scheduler import Policy

GAP = 10e-6
TBF_BURST_MIN = 131072  # hack/testbed.sh TBF_BURST_MIN_BYTES


def tbf_burst(rate_mbit):
    return max(rate_mbit * 250, TBF_BURST_MIN)


def series(scenario, name):
    res = scenario["series"].get(name, {}).get("results", [])
    return [(r["bytes"], r["time_us"] * 1e-6) for r in res if r.get("time_us")]


def link_for(rate_mbit, alpha, eff, line, gap=GAP, name=None):
    beta = 8.0 / (rate_mbit * 1e6 * eff)
    return Link(name or f"{rate_mbit}M", alpha, beta, gap, tbf_burst(rate_mbit), min(beta, 1.0 / line))


def single_rail_times(rate, alpha, eff, line, n, sizes):
    pol = Policy((link_for(rate, alpha, eff, line),), n)
    return [run_op(pol, s).seconds for s in sizes]


def _golden(f, lo, hi, iters=30):
    """Minimum of f on [lo, hi]: a log-spaced grid first (the steady-state token bucket makes f
    step-wise, with local minima), then golden-section search around the best grid point."""
    k = 24
    grid = [lo * (hi / lo) ** (i / k) for i in range(k + 1)]
    best = min(range(len(grid)), key=lambda i: f(grid[i]))
    lo, hi = grid[max(0, best - 1)], grid[min(k, best + 1)]
    g = (5 ** 0.5 - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _rel_err(pts, sim):
    return sum(((p - m) / m) ** 2 for p, (_, m) in zip(sim, pts))


def fit_rail(rate, n, points):
    """(alpha, efficiency, line bytes/s) of one rail from [(bytes, seconds)] measured on n ranks."""
    small = [(s, t) for s, t in points if s <= 16 << 10]
    mid = [(s, t) for s, t in points if 32 << 10 <= s <= 1 << 20]
    large = [(s, t) for s, t in points if s >= 8 << 20]
    if not small or not mid or not large:
        raise ValueError(f"rail {rate} Mbit/s: need sizes <= 16 KiB, 32 KiB - 1 MiB and >= 8 MiB to fit")
    alpha, eff, line = 50e-6, 1.0, 4 * rate * 1e6 / 8
    for _ in range(4):
        sim = single_rail_times(rate, alpha, eff, line, n, [s for s, _ in large])
        eff *= statistics.mean(p / m for p, (_, m) in zip(sim, large))
        alpha = _golden(lambda a: _rel_err(small, single_rail_times(rate, a, eff, line, n, [s for s, _ in small])),
                        1e-6, 1e-3)
        lo = rate * 1e6 / 8 * eff
        band = small + mid  # the bucket's line rate shows wherever the bucket is not drained
        line = _golden(lambda x: _rel_err(band, single_rail_times(rate, alpha, eff, x, n, [s for s, _ in band])),
                       lo, 20 * lo)
    return alpha, eff, line


def fit_suite(result):
    n = result["ranks"]
    rails = []
    for sc in result["scenarios"]:
        pts = series(sc, "nezha-single")
        if not pts:
            continue
        rate = sc["rates_mbit"][sc["best_rail"]]
        ranks = sc.get("ranks") or n  # a suite may run some scenarios at other rank counts
        alpha, eff, line = fit_rail(rate, ranks, pts)
        rails.append({"scenario": sc["name"], "rate_mbit": rate, "ranks": ranks, "alpha": alpha, "efficiency": eff,
                      "line_Bps": line})
    if not rails:
        raise ValueError("the suite result has no nezha-single series to fit")
    fit = {"ranks": n, "rails": rails, "gap": GAP,
           "alpha": statistics.mean(r["alpha"] for r in rails),
           "efficiency": statistics.mean(r["efficiency"] for r in rails),
           "line_Bps": statistics.mean(r["line_Bps"] for r in rails),
           "source": f"{result.get('mode', '?')} suite run started {result.get('started', '?')}, "
                     f"{' and '.join(str(k) for k in sorted({r['ranks'] for r in rails}))} ranks"}
    fit["split_cost"] = fit_split_cost(result, fit)
    return fit


def links_for(rates, fit, alpha=None, bucket=True):
    """Links of these TBF rates; `alpha` (seconds) overrides the fitted per-rail latency;
    bucket=False drops the TBF token bucket (plain alpha-beta links: NICs at scale have none)."""
    out = []
    for i, rate in enumerate(rates):
        own = [r for r in fit["rails"] if r["rate_mbit"] == rate]
        r = own[0] if own else fit
        a = r["alpha"] if alpha is None else alpha
        link = link_for(rate, a, r["efficiency"], r["line_Bps"], fit["gap"], name=f"r{i}:{rate}M")
        out.append(link if bucket else Link(link.name, link.alpha, link.beta, link.gap))
    return tuple(out)


def policy_for(rates, n, fit, algo="runtime", split_cost=None, alpha=None, bucket=True, fold=DEFAULT_FOLD):
    sc = fit.get("split_cost", 0.0) if split_cost is None else split_cost
    return Policy(links_for(rates, fit, alpha, bucket), n, algo=algo, split_cost=sc, fold=fold)


def fit_alpha_by_ranks(result, fit):
    """The latency of one message step at each rank count of a test-bed sweep (measure.py), from
    its nezha-single operations <= 16 KiB, bandwidth terms kept from the suite fit. On the test
    bed every rank is a process on the same 2 cores, so a hop's latency grows with the ranks per
    core (a wake-up per message); a real cluster has a host per rank, so the scale runs use the
    fewest-ranks value."""
    out = {}
    for sc in result["scenarios"]:
        n = sc.get("ranks") or result["ranks"]
        small = [(s, t) for s, t in series(sc, "nezha-single") if s <= 16 << 10]
        if not small:
            continue

        def err(a, sc=sc, small=small, n=n):
            pol = policy_for(sc["rates_mbit"], n, fit, alpha=a)
            return _rel_err(small, [run_op(pol, s, force="cold").seconds for s, _ in small])

        out[n] = _golden(err, 1e-6, 2e-3)
    return out


def fit_split_cost(result, fit):
    excess = []
    for sc in result["scenarios"]:
        pol = policy_for(sc["rates_mbit"], sc.get("ranks") or result["ranks"], fit, split_cost=0.0)
        for s, t in series(sc, "nezha-adaptive"):
            if 256 << 10 <= s <= 4 << 20:
                ratios, _ = learn_ratios(pol, s, 5)
                excess.append(t - run_op(pol, s, ratios, force="hot").seconds)
    return max(0.0, statistics.median(excess)) if excess else 0.0
