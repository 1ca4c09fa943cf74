"""The report's control-plane section (control traffic that grows O(log N), not O(N)): agreement and
heartbeat traffic per rank vs N, a host losing every rail, waves, and PASS/MISS against
"agreement/control traffic that grows O(log N) or O(1) per operation per rank, not O(N)". The
runtime runs the dissemination round and heartbeats to its log2 N dissemination neighbours with a
flooded verdict on a silent one (the runtime's; the all-to-all round and all-to-all heartbeats it
had before, kept for comparison); tree and epoch are what-ifs priced here."""

from . import liveness, waves

ROUND_SCHEMES = ("all-to-all", "tree", "dissemination")


def _list(xs):
    return ", ".join(f"{v:.2f}" for v in xs or []) or "-"


def _log2_ceil(n):
    return liveness.log2_ceil(n)


def grows_like_log(per_n):
    """O(log N): messages(N) / ceil(log2 N) stays within a factor 2 over every N >= 2."""
    q = [v / _log2_ceil(n) for n, v in per_n.items() if n >= 2]
    return max(q) <= 2 * min(q), max(q) / min(q)


def checks(res):
    out = []
    tr = res["agreement_traffic"]
    ns = sorted(tr, key=int)
    for scheme, who in (("dissemination", "the runtime's round, control_mesh.cc maxReduce"),
                        ("all-to-all", "the runtime's older round, for comparison")):
        msgs = {int(n): tr[n][scheme]["messages"] for n in ns}
        ok, spread = grows_like_log(msgs)
        out.append((f"control goal: agreement messages per rank per operation O(log N) or O(1), not O(N) — "
                    f"{scheme} round ({who})", ok,
                    ", ".join(f"N={n} {msgs[int(n)]:.0f}" for n in ns) +
                    f" (messages / ceil(log2 N) varies {spread:.0f}x over N)"))
    hb = res["heartbeats"]
    for scheme, who in (("neighbours", "runtime: dissemination neighbours only, every rail"),
                        ("all-to-all", "the older runtime, for comparison: every peer, every rail")):
        per = {int(n): hb[n][scheme]["messages_per_s"] for n in hb}
        ok, spread = grows_like_log(per)
        out.append((f"control goal: heartbeat messages per rank per second O(log N), not O(N) — {scheme} ({who})", ok,
                    ", ".join(f"N={n} {v:.0f}/s" for n, v in sorted(per.items())) +
                    f" (per ceil(log2 N) varies {spread:.1f}x; O(log N) here means within 2x)"))
    cut = res["host_cut"]
    bound = liveness.PEER_SILENCE + liveness.BEAT
    for scheme, who in (("neighbours", "runtime, neighbours + flooded verdict"), ("all-to-all", "the older runtime")):
        worst = {int(n): cut[n][scheme]["max_s"] for n in cut}
        ok = all(v <= 1.0 for v in worst.values())
        out.append((f"control goal: a host loses every rail -> every peer knows <= 1 s ({who}; "
                    f"bound silence + one beat = {bound:.1f} s)", ok,
                    ", ".join(f"N={n} {v:.2f} s" for n, v in sorted(worst.items()))))
    return out


def lines(res, measured=None):
    L = ["", "Control plane vs N (goal: \"agreement/control traffic that grows O(log N) or O(1) per operation "
         "per rank, not O(N)\"). The runtime's per-op round is a dissemination ("
         "runtime/src/failover/control_mesh.cc maxReduce): step k sends the running max (7 doubles per rail, 2 rails: "
         "a 132-byte frame) to (i + 2^k) mod N and takes one from (i - 2^k) mod N; ceil(log2 N) steps, exact for any "
         "N since max is idempotent (the runtime's unit test counts ceil(log2 N) messages per rank per round at N = "
         "2, 3, 5, 8). The older runtime's round was the all-to-all (every rank sends its vector to every "
         "peer), kept here for comparison; tree is recursive doubling (fold-in and fold-out when N is no power of "
         "two), a what-if. Per rank per operation, simulated (messages and bytes counted on the simulated network):",
         ""]
    tr = res["agreement_traffic"]
    ns = sorted(tr, key=int)
    L += ["| N | " + " | ".join(f"{s} msgs / bytes / time" for s in ROUND_SCHEMES) + " |", "|---|" + "---|" * len(ROUND_SCHEMES)]
    for n in ns:
        L.append(f"| {n} | " + " | ".join(f"{tr[n][s]['messages']:.1f} / {tr[n][s]['bytes']:.0f} B / "
                                         f"{tr[n][s]['seconds'] * 1e3:.2f} ms" for s in ROUND_SCHEMES) + " |")
    L += ["", "Round-free small operations (runtime, `NEZHA_ROUND_FREE_BYTES` 64 KiB): a cold operation up to 64 KiB "
          "with every rail alive skips its round and every 16th holds it, so a loop of 1 KiB operations pays 1/16 of "
          "a round per operation (split operations and operations > 64 KiB always pay one): 1 KiB op over the same "
          "without any round: " +
          ", ".join(f"N={n} all-to-all {res['small_op_over_no_round'][n]['all-to-all, round-free']:.2f}x "
                    f"(a round every op {res['small_op_over_no_round'][n]['all-to-all']:.2f}x), dissemination "
                    f"{res['small_op_over_no_round'][n]['dissemination, round-free']:.2f}x"
                    for n in (4, 128, 1024) if n in res["small_op_over_no_round"]) + "."]
    hb = res["heartbeats"]
    L += ["", f"Heartbeats (runtime: a {liveness.HERE_BYTES}-byte HERE frame — the mesh header, no payload — "
          f"every {liveness.BEAT * 1e3:.0f} ms on every rail's control connection, to the rank's dissemination neighbours "
          "(i +- 2^k) mod N only, at most 2 ceil(log2 N) peers: O(log N x rails) per rank; a silent neighbour's verdict, "
          f"{liveness.VERDICT_BYTES} bytes, flooded over the same graph. The older runtime: to every peer, O(N x rails), "
          "kept for comparison). Per rank, 2 rails; the sender's share is the heartbeat thread's time putting one "
          "beat's frames out (10 us per message assumed, plus the bytes):", "",
          "| N | neighbours (runtime) msgs/s | bytes/s | sender busy | all-to-all (before) msgs/s | bytes/s | sender busy |",
          "|---|---|---|---|---|---|---|"]
    for n in sorted(hb, key=int):
        a, b = hb[n]["all-to-all"], hb[n]["neighbours"]
        L.append(f"| {n} | {b['messages_per_s']:.0f} | {b['bytes_per_s'] / 1e3:.1f} kB | {b['sender_busy'] * 100:.2f} % | "
                 f"{a['messages_per_s']:.0f} | {a['bytes_per_s'] / 1e3:.1f} kB | {a['sender_busy'] * 100:.1f} % |")
    cut = res["host_cut"]
    L += ["", "A host loses every rail (its peers see only silence): seconds from the cut until a peer knows it is "
          "unreachable and fails its operation (the cut host itself throws at once: no link left), worst / median "
          "over every peer and 5 cut instants over one beat; the verdict's frames (every rail) in all and per rank:", "",
          "| N | neighbours + flooded verdict (runtime) | verdict frames, all / per rank | heartbeats all-to-all (before) | "
          "heartbeats off |", "|---|---|---|---|---|"]
    for n in sorted(cut, key=int):
        c = cut[n]
        L.append(f"| {n} | {c['neighbours']['max_s']:.2f} / {c['neighbours']['median_s']:.2f} s | "
                 f"{c['neighbours']['verdict_messages']} / {c['neighbours']['verdict_messages_per_rank']:.1f} | "
                 f"{c['all-to-all']['max_s']:.2f} / {c['all-to-all']['median_s']:.2f} s | {c['off']['max_s']:.1f} s |")
    if measured and 2 in cut:
        after, before = measured.get("after", {}), measured.get("before", {})
        L += ["", f"Measured on the test bed (2 ranks, 800/300 Mbit/s, `{measured['rel']}`): the peer's error "
              f"{_list(after.get('all_down_peer_s'))} s after the cut with heartbeats, "
              f"{_list(before.get('all_down_peer_s'))} s without (recorded with all-to-all heartbeats: at 2 ranks the "
              f"one peer is the one neighbour, the same frames); simulated at N=2: {cut[2]['neighbours']['max_s']:.2f} s "
              f"worst, {cut[2]['off']['max_s']:.1f} s without."]
    rb = res["restore_bed"]
    L += ["", f"Waves (runtime, `NEZHA_WAVE_BYTES` 8 MiB): a restored rail re-enters between two waves of the "
          f"operation in flight. The failure-timing benchmark's restore case simulated (2 ranks, 800/300 fitted TBF "
          f"rails, 64 MiB operations, {rb['op_while_cut_s']:.2f} s each on the survivor, r1 restored at 8 instants "
          f"over one operation; hold-down 0.5 s, rebuild {rb['rebuild_s'] * 1e3:.0f} ms: connect + latency and 1 MiB "
          f"bandwidth probes): share back {rb['waves']['mean_s']:.2f} s mean, {rb['waves']['min_s']:.2f}-"
          f"{rb['waves']['max_s']:.2f} s with waves; {rb['off']['mean_s']:.2f} s mean, {rb['off']['min_s']:.2f}-"
          f"{rb['off']['max_s']:.2f} s at operation boundaries only" +
          (f" (measured: {_list(measured.get('after', {}).get('share_back_s'))} s with waves, "
           f"{_list(measured.get('before', {}).get('share_back_s'))} s without)." if measured else ".")]
    wc = res["wave_cost"]
    L += ["", "The price of waves at scale: a 64 MiB operation while one of two 500 Mbit/s rails is out holds a round "
          "after every 8 MiB wave: " + "; ".join(
              f"N={n}: {wc[n]['all-to-all']['rounds']} rounds, all-to-all +{(wc[n]['all-to-all']['waves_s'] - wc[n]['all-to-all']['plain_s']) * 1e3:.0f} ms "
              f"({(wc[n]['all-to-all']['waves_s'] / wc[n]['all-to-all']['plain_s'] - 1) * 100:.1f} % of "
              f"{wc[n]['all-to-all']['plain_s']:.2f} s), dissemination "
              f"+{(wc[n]['dissemination']['waves_s'] - wc[n]['dissemination']['plain_s']) * 1e3:.1f} ms"
              for n in sorted(wc, key=int)) + "."]
    fo = res["failover"]
    L += ["", "Failover cost at 1,024 ranks, dissemination (runtime) vs all-to-all (the older runtime) rounds (64 MiB, 500/500, "
          "rail 1 lost half way; detection + agreement + retire + replay + the replay's round):", "",
          "| case | detection | agreement | retire round | replay | replay's round | stall vs healthy | control bytes per rank |",
          "|---|---|---|---|---|---|---|---|"]
    for kind in ("link event", "black hole"):
        for scheme in ("all-to-all", "dissemination"):
            r = fo.get(f"N=1024, {kind}, {scheme}")
            if r:
                L.append(f"| {kind}, {scheme} | {(r['detected_at_s'] - r['fail_at_s']) * 1e3:.0f} ms | "
                         f"{r['agree_round_s'] * 1e3:.2f} ms | {r['retire_round_s'] * 1e3:.2f} ms | "
                         f"{r['replay_s'] * 1e3:.0f} ms | {r['replay_round_s'] * 1e3:.2f} ms | {r['stall_s'] * 1e3:.0f} ms | "
                         f"{r['control_bytes_per_rank'] / 1e3:.0f} kB |")
    L += ["", "The retire round's vector holds a flag per rank and leaving rail (N + 1 doubles), so even as a "
          "dissemination it sends O(N log N) bytes per rank in O(log N) messages; the all-to-all sends O(N^2) bytes. "
          "Detection does not depend on the round: a link event is ~1 ms, a black hole the 400 ms watchdog, a whole "
          "host the heartbeats' silence (table above).", ""]
    L += ["Control traffic per rank (PASS/MISS):", ""]
    for name, ok, detail in checks(res):
        L.append(f"- {'PASS' if ok else 'MISS'} {name}: {detail}")
    return L
