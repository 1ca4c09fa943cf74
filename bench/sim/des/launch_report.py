"""Report lines for the launch replay (launch.py): where the runtime split on the test bed, why
128 KiB ran whole on one rail, and the validation errors of the replay next to the steady-state
model it replaced."""


def _size(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def lines(fit, rows, summary, steady_summary):
    msz = fit.get("measured_split_sizes", {})
    if not msz:
        return []
    firsts = [(n, m) for n, m in sorted(msz.items()) if m["first_split"]]
    L = ["", "Where the split starts on the test bed (the sweep above: the runtime's adaptive series against its "
         "single-rail series, same run). The runtime split from " +
         ", ".join(f"N={n} {_size(m['first_split'])}" for n, m in firsts) + " on, winning there " +
         ", ".join(f"{m['gain'][m['first_split']]:.2f}x" for _, m in firsts) +
         "; below that it ran every operation whole on the 200 Mbit/s rail, the same plan as the single series, "
         "whose times then differ from it by up to " +
         ", ".join(f"N={n} {m['same_plan_spread'] * 100:.0f} %" for n, m in sorted(msz.items())
                   if m["same_plan_spread"] is not None) +
         " (launch-to-launch noise; a single / adaptive above 1 at 128K is such a difference, not a split). "
         "So in this sweep the threshold is the same at every N it covers: it does not fall from 2 to 8 ranks. "
         "The splits it timed at the first split sizes gave the 100 Mbit/s rail " +
         "; ".join(f"N={n} " + ", ".join(f"{_size(s)} {sh * 100:.0f} %" for s, sh in list(m["slow_share"].items())[:3])
                   for n, m in sorted(msz.items())) + " (its bandwidth share: 33 %)."]
    L += ["", "Why 128K ran whole, and what the simulator now replays: nezha-bench probes the rails one after "
          "the other (two 1 MiB allreduces each), so the first size of a launch (128K) starts with the slow rail's "
          "TBF bucket just emptied by its probe and the fast rail's refilled meanwhile. The tuner's first update "
          "(after 5 operations) sees the slow rail at its shaped rate and the fast one at line speed, cuts the slow "
          "rail's share under the 32 KiB minimum slice (25 % of 128 KiB), and a starved rail is re-probed only after "
          "4 agreements (20 operations), past the size's 15; at 256K the slow rail starts with the full bucket it "
          "refilled while starved, so its first update swings the other way. The rank logs of a re-run with "
          "NEZHA_VERBOSE=1 show both (`bench/results/issue18-perf/simval-tuner-20261127T1819Z.txt`, and below this "
          "block). The DES replays each measured launch "
          "operation by operation on one network (probe, warmup, the tuner every 5 operations, buckets carried "
          "over): no parameter is added, the buckets are the bed's (hack/testbed.sh) and the rest is the fit above. "
          "Before it, every operation was priced alone in a steady loop with the tuner's fixed point, which split "
          "128K at N=2 and 4."]
    sweep = [r for r in rows if r["source"] == "test-bed sweep" and r["series"] == "nezha-adaptive"
             and 128 << 10 <= r["bytes"] <= 512 << 10]
    if sweep:
        L += ["", "Adaptive series, simulated / measured - 1: steady-state model (before) and launch replay (now); "
              "H = split, C = whole on one rail:", "",
              "| N | size | measured | before | now | now: split timed (slow rail) |", "|---|---|---|---|---|---|"]
        for r in sorted(sweep, key=lambda r: (r["ranks"], r["bytes"])):
            split = r.get("sim_split")
            L.append(f"| {r['ranks']} | {_size(r['bytes'])} | {r['measured_s'] * 1e3:.2f} ms "
                     f"({'H' if r.get('measured_hot') else 'C'}) | {(r['steady_over_measured'] - 1) * 100:+.0f} % "
                     f"({'H' if r['steady_hot'] else 'C'}) | {(r['sim_over_measured'] - 1) * 100:+.0f} % "
                     f"({'H' if r['sim_hot'] else 'C'}) | {min(split) * 100:.0f} % |" if split else "")
        pairs = [(b, a) for b in steady_summary for a in summary
                 if (b["source"], b["ranks"], b["series"], b["band"]) == (a["source"], a["ranks"], a["series"], a["band"])]
        L += ["", "Median (max) |simulated / measured - 1| per band, steady-state model (before) and launch replay "
              "(now), same fit:", "", "| source | N | series | sizes | before | now |", "|---|---|---|---|---|---|"]
        for b, a in pairs:
            L.append(f"| {b['source']} | {b['ranks']} | {b['series'].replace('nezha-', '')} | {b['band'].split(' ')[0]} | "
                     f"{b['median_abs_error'] * 100:.0f} % ({b['max_abs_error'] * 100:.0f} %) | "
                     f"{a['median_abs_error'] * 100:.0f} % ({a['max_abs_error'] * 100:.0f} %) |")
        worse = [a for b, a in pairs if a["max_abs_error"] > b["max_abs_error"] + 0.1]
        if worse:
            L += ["", "Worse with the replay: " + "; ".join(
                f"{a['source']} N={a['ranks']} {a['series'].replace('nezha-', '')} {a['band'].split(' ')[0]} "
                f"(max {a['max_abs_error'] * 100:.0f} %)" for a in worse) + "."]
        differ = [r for r in rows if r["series"] == "nezha-adaptive" and r.get("measured_hot") is not None
                  and r["sim_hot"] != r["measured_hot"]]
        if differ:
            L += ["", "Points where the replay's plan is not the bed's (a first update next to the 25 % cut falls on "
                  "one side in the deterministic replay and may fall on the other on the noisy bed): " + "; ".join(
                      f"{r['source']} {r['scenario']} N={r['ranks']} {_size(r['bytes'])}: measured "
                      f"{'split' if r['measured_hot'] else 'whole'}, replay {'split' if r['sim_hot'] else 'whole'}"
                      + (f" (smallest share {min(r['sim_split']) * 100:.0f} %)" if r.get("sim_split") else "")
                      + f", {(r['sim_over_measured'] - 1) * 100:+.0f} %" for r in differ) + "."]
    return L
