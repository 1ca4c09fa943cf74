"""The discrete-event simulator (bench/sim/des): event order, a 2-rank case by hand, bytes
conserved, NIC contention, the TBF bucket, folding, the runtime's rules, failover replaying
exactly the missing chunks, and the fit recovering known parameters."""

import pytest

from bench.sim.des import algorithms, collective, control
from bench.sim.des.collective import RailRun, run_alone
from bench.sim.des.engine import Engine
from bench.sim.des.failover import WATCHDOG, run_failover
from bench.sim.des.fit import fit_rail, link_for
from bench.sim.des.network import Link, Network
from bench.sim.des.op import learn_ratios, run_op
from bench.sim.des.scheduler import Policy, auto_cold_threshold, chunked, split_count, to_weights, tune_ratios

A, B, G = 50e-6, 1 / 100e6, 10e-6
RAIL = Link("r", A, B, G)


def test_events_run_in_time_then_posting_order():
    eng, seen = Engine(), []
    eng.at(2.0, seen.append, "late")
    eng.at(1.0, seen.append, "first")
    eng.at(1.0, seen.append, "second")  # same instant: posting order

    def chain():
        seen.append("chain")
        eng.after(0.0, seen.append, "after-chain")  # same instant, posted later: after "second"

    eng.at(1.0, chain)
    eng.run()
    assert seen == ["first", "second", "chain", "after-chain", "late"]
    assert eng.now == 2.0
    with pytest.raises(ValueError, match="before now"):
        eng.at(1.0, seen.append, "past")


def test_two_rank_ring_by_hand():
    # 2 ranks, S bytes: reduce-scatter and allgather, one step each of S/2 bytes. A step: the
    # sender holds its NIC gap + S/2*beta; the peer's half arrives after gap + alpha and takes
    # S/2*beta to receive. Both ranks are symmetric, so a step is gap + alpha + S/2*beta.
    s = 1 << 20
    t = run_alone([RAIL], 0, 2, [("ring", s)])
    assert t == pytest.approx(2 * (G + A + s / 2 * B), rel=1e-12)
    # recursive doubling on 2 ranks: one exchange of the whole vector
    assert run_alone([RAIL], 0, 2, [("rd", s)]) == pytest.approx(G + A + s * B, rel=1e-12)
    # binomial tree: reduce (one message) then broadcast (one message), in sequence
    assert run_alone([RAIL], 0, 2, [("tree", s)]) == pytest.approx(2 * (G + A + s * B), rel=1e-12)


def test_two_rank_operation_with_agreement_by_hand():
    pol = Policy((RAIL,), 2, cold_threshold=1 << 30)
    res = run_op(pol, 4096)  # rd below 64 KiB, then the all-to-all round of 7 doubles
    frame = control.frame_bytes(7)
    assert res.seconds == pytest.approx((G + A + 4096 * B) + (G + A + frame * B), rel=1e-12)
    assert res.agreement_seconds == pytest.approx(G + A + frame * B, rel=1e-12)


def _program_bytes(algo, n, s):
    return sum(b for r in range(n) for _, sends, _ in algorithms.program(algo, r, n, s) for _, b in sends)


@pytest.mark.parametrize("algo", ["ring", "rd", "rhd", "tree"])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_bytes_are_conserved(algo, n):
    s = 1000003 * 4
    eng = Engine()
    net = Network(eng, [RAIL], n)
    run = RailRun(eng, net, 0, n, [(algo, s)], classes=n).start(0.0)
    eng.run()
    assert run.finished()
    assert net.sent_bytes[0] == net.delivered_bytes[0] == _program_bytes(algo, n, s)
    assert net.dropped_bytes[0] == 0
    if algo == "ring":  # every rank sends every chunk but one in each half
        assert net.sent_bytes[0] == 2 * (n - 1) * s


def test_every_message_finds_its_receiver():
    # per tag, the sends addressed to a rank equal the receives it waits for
    for algo in ("ring", "rd", "rhd", "tree", "a2a"):
        for n in (2, 3, 6, 7, 8, 12):
            expect, got = {}, {}
            for r in range(n):
                for tag, sends, nrecv in algorithms.program(algo, r, n, 4096):
                    expect[(r, tag)] = expect.get((r, tag), 0) + nrecv
                    for peer, _ in sends:
                        got[(peer, tag)] = got.get((peer, tag), 0) + 1
            assert {k: v for k, v in expect.items() if v} == got, (algo, n)


def test_folding_is_exact_for_symmetric_algorithms():
    for algo in ("ring", "rd", "rhd", "a2a"):
        full = run_alone([RAIL], 0, 16, [(algo, 1 << 20)], fold=0)
        for fold in (8, 4, 2):
            assert run_alone([RAIL], 0, 16, [(algo, 1 << 20)], fold=fold) == pytest.approx(full, rel=1e-12)
    assert collective.classes_for(16, [("tree", 1)], fold=2) == 16  # not symmetric: never folded
    assert collective.classes_for(12, [("rd", 1)], fold=2) == 12  # not a power of two


def test_nic_contention_within_a_rail_not_across_rails():
    def two_messages(rail_b):
        eng, done = Engine(), []
        net = Network(eng, [RAIL, RAIL], 3)
        net.send(0, 0, 1, 100000, lambda: None, lambda: done.append(eng.now))
        net.send(rail_b, 0, 2, 100000, lambda: None, lambda: done.append(eng.now))
        eng.run()
        return max(done)

    one = G + A + 100000 * B
    assert two_messages(1) == pytest.approx(one)  # two rails: in parallel
    assert two_messages(0) == pytest.approx(one + G + 100000 * B)  # one rail: the second waits


def test_tbf_bucket_lets_a_burst_through_at_line_speed():
    shaped = Link("tbf", A, 1 / 10e6, 0.0, burst=100000, line_beta=1 / 1000e6)
    eng, done = Engine(), []
    net = Network(eng, [shaped], 2)
    net.send(0, 0, 1, 50000, lambda: None, lambda: done.append(eng.now))
    eng.run()
    # tokens: line speed; the receive overlaps the send (first byte after alpha)
    assert done[0] == pytest.approx(A + 50000 / 1000e6)
    net.send(0, 0, 1, 1000000, lambda: None, lambda: done.append(eng.now))
    eng.run()
    # the rest of the bucket (about 50 KB) at line speed, the remainder at the shaped rate
    assert done[1] - done[0] > 0.9 * (1000000 - 100000) / 10e6
    with pytest.raises(ValueError, match="burst needs"):
        Link("bad", A, 1 / 10e6, 0.0, burst=1000, line_beta=0.0)


def test_runtime_rules():
    assert to_weights([0.25, 0.75]) == [16384, 49152]
    # a share under the minimum slice is dropped: the whole buffer goes to the other rail
    assert split_count(1000, to_weights([0.01, 0.99]), 32) == [(1, 0, 1000)]
    assert split_count(1000, to_weights([0.5, 0.5]), 32) == [(0, 0, 500), (1, 500, 500)]
    assert chunked([(0, 0, 10 << 20)], 4) == [(0, i * (10 << 20) // 10, (10 << 20) // 10) for i in range(10)]
    assert len(chunked([(0, 0, 1 << 30)], 4)) == 16  # at most 16 chunks per slice
    # equal latency: the 16 KiB floor; a slow-latency second rail pushes the threshold up
    assert auto_cold_threshold([1e-4, 1e-4], [1e8, 1e8]) == 16 << 10
    assert auto_cold_threshold([1e-4, 1e-2], [1e8, 1e8]) > 1 << 20
    # the tuner's fixed point gives each rail its measured rate's share
    r = [0.5, 0.5]
    for _ in range(30):
        r = tune_ratios(r, [r[0] * 1e6, r[1] * 1e6], [r[0] * 1e6 / 80e6, r[1] * 1e6 / 20e6], 0.6)
    assert r == pytest.approx([0.8, 0.2], abs=1e-6)


def test_learned_split_is_bandwidth_proportional_for_large_operations():
    pol = Policy((Link("fast", A, 1 / 100e6, G), Link("slow", A, 1 / 25e6, G)), 4)
    ratios, history = learn_ratios(pol, 64 << 20, 10)
    assert ratios[1] == pytest.approx(0.2, abs=0.01)
    assert len(history) > 1
    assert run_op(pol, 64 << 20, ratios).seconds < run_op(pol, 64 << 20, force="cold").seconds


def test_sizes_without_room_for_two_slices_run_cold_like_the_runtime():
    pol = Policy((Link("fast", A, 1 / 100e6, G), Link("slow", A, 1 / 25e6, G)), 4, cold_threshold=16 << 10)
    assert not pol.splittable(32 << 10) and not pol.splittable((64 << 10) - 4) and pol.splittable(64 << 10)
    assert pol.plan(32 << 10, [0.5, 0.5]) == [(pol.cold_rail(32 << 10), 0, (32 << 10) // 4)]
    assert len(pol.plan(1 << 20, [0.5, 0.5])) == 2


def test_agreement_round_grows_linearly_all_to_all_and_logarithmically_as_a_tree():
    a2a = [control.round_seconds([RAIL], 0, n, 14, "all-to-all") for n in (64, 128, 256)]
    tree = [control.round_seconds([RAIL], 0, n, 14, "tree") for n in (64, 128, 256)]
    assert a2a[2] / a2a[1] == pytest.approx(2.0, rel=0.1)
    assert tree[2] - tree[1] == pytest.approx(tree[1] - tree[0], rel=0.01)  # one step more per doubling
    assert control.round_seconds([RAIL], 0, 256, 14, "epoch", changed=False) == 0.0
    with pytest.raises(ValueError, match="unknown agreement scheme"):
        control.start_round(Engine(), Network(Engine(), [RAIL], 2), 0, 2, 1, "gossip")


def _covers_once(chunks, units):
    marks = [0] * units
    for _, off, count in chunks:
        for u in range(off, off + count):
            marks[u] += 1
    return all(m == 1 for m in marks)


@pytest.mark.parametrize("kind", ["black hole", "link event"])
@pytest.mark.parametrize("frac", [0.0, 0.3, 0.75])
def test_failover_replays_exactly_the_missing_chunks(kind, frac):
    links = (Link("a", A, 1 / 100e6, G), Link("b", A, 1 / 100e6, G))
    pol = Policy(links, 4)
    s = 48 << 20
    units = s // 4
    r = run_failover(pol, s, [0.5, 0.5], fail_rail=1, fail_frac=frac, kind=kind)
    failed = [c for c in chunked(pol.plan(s, [0.5, 0.5], force="hot"), 4) if c[0] == 1]
    lead = len(failed) - len(r.redo_chunks)
    assert r.redo_chunks == failed[lead:]  # a suffix of the failed rail's chunks
    assert r.lost_units == r.replayed_units == sum(c for _, _, c in failed[lead:])
    assert all(c[0] == 0 for c in r.replay_chunks)  # only the survivor replays
    # what stands plus what is replayed covers the buffer exactly once
    assert _covers_once(r.done_chunks + r.replay_chunks, units)
    if frac == 0.0:
        assert lead == 0
    else:
        assert 0 < lead < len(failed)
    assert r.detected_at > r.fail_at
    if kind == "black hole":
        assert r.detected_at - r.fail_at >= WATCHDOG - 1e-9  # the watchdog window
    else:
        assert r.detected_at - r.fail_at < 0.01


def test_retire_round_costs_grow_with_n():
    links = (Link("a", A, 1 / 100e6, G), Link("b", A, 1 / 100e6, G))
    small = run_failover(Policy(links, 16), 16 << 20, [0.5, 0.5], 1, 0.5, "link event")
    big = run_failover(Policy(links, 256), 16 << 20, [0.5, 0.5], 1, 0.5, "link event")
    # N*k+k doubles to each of N-1 peers: bytes per rank grow about N^2
    assert big.control_bytes / small.control_bytes > 100
    tree = run_failover(Policy(links, 256), 16 << 20, [0.5, 0.5], 1, 0.5, "link event", scheme="tree")
    assert tree.retire_round < big.retire_round


def test_fit_recovers_known_rail_parameters():
    rate, alpha, eff, line = 500, 120e-6, 0.9, 300e6
    sizes = [1 << k for k in range(10, 26)]
    pol = Policy((link_for(rate, alpha, eff, line),), 4)
    pts = [(s, run_op(pol, s).seconds) for s in sizes]
    a, e, line_fit = fit_rail(rate, 4, pts)
    assert e == pytest.approx(eff, rel=0.02)
    # alpha and the bucket's line rate trade off on small sizes: the fitted pair must reproduce
    # the series, and alpha be of the right size
    refit = Policy((link_for(rate, a, e, line_fit),), 4)
    assert max(abs(run_op(refit, s).seconds / t - 1) for s, t in pts) < 0.1
    assert a == pytest.approx(alpha, rel=0.3)


def test_fit_recovers_step_latency_per_rank_count():
    fit = {"rails": [], "alpha": 1e-4, "efficiency": 0.9, "line_Bps": 300e6, "gap": 10e-6, "split_cost": 0.0}
    from bench.sim.des.fit import fit_alpha_by_ranks, policy_for

    true = {2: 60e-6, 8: 300e-6}
    doc = {"ranks": 2, "scenarios": []}
    for n, a in true.items():
        pol = policy_for((200, 100), n, fit, alpha=a)
        res = [{"bytes": s, "time_us": run_op(pol, s, force="cold").seconds * 1e6} for s in (1024, 4096, 16384)]
        doc["scenarios"].append({"name": f"n{n}", "ranks": n, "rates_mbit": [200, 100],
                                 "series": {"nezha-single": {"results": res}}})
    got = fit_alpha_by_ranks(doc, fit)
    assert got[2] == pytest.approx(true[2], rel=0.05)
    assert got[8] == pytest.approx(true[8], rel=0.05)



# The launch replay (launch.py): a benchmark launch operation by operation on one network, the
# token buckets carried over from the probe and from one size to the next.
TWO_TO_ONE = (Link("fast", A, 1 / 25e6, G), Link("slow", 20 * A, 1 / 12.5e6, G))  # the tuner has to move
TWO_TO_ONE_TBF = (Link("fast", A, 1 / 25e6, G, burst=131072, line_beta=1 / 500e6),
                  Link("slow", A, 1 / 12.5e6, G, burst=131072, line_beta=1 / 500e6))


def test_launch_replay_carries_the_probe_buckets_into_the_first_size():
    from bench.sim.des.launch import Launch, replay

    pol = Policy(TWO_TO_ONE_TBF, 2)
    # after the probe (the slow rail last) the slow rail's bucket is empty, the fast one's full
    probed = Launch(pol)
    assert probed.net.tokens[1][0] < 0.1 * 131072
    assert probed.net.tokens[0][0] > 0.9 * 131072
    runs = replay(pol, [128 << 10, 256 << 10], 10, 5)
    first = runs[128 << 10]
    # the first update (before operation 5) cuts the slow rail under 32 KiB of 128 KiB: whole on one rail
    assert first.hot[:5] == [True] * 5
    assert first.ratios[5][1] < 0.25 and not any(first.hot[5:])
    # at 256 KiB the slow rail starts with the bucket it refilled while starved: its first
    # update gives it more than its bandwidth share
    second = runs[256 << 10]
    assert max(r[1] for r in second.ratios) > 0.4
    # the steady-state model (a loop of one operation, the tuner's fixed point) splits 128 KiB
    ratios, _ = learn_ratios(pol, 128 << 10, 5)
    assert run_op(pol, 128 << 10, ratios).hot


def test_launch_counts_the_barrier_and_agrees_every_fifth_operation():
    from bench.sim.des.launch import Launch

    launch = Launch(Policy(TWO_TO_ONE, 2), probe=False)
    run = launch.size(1 << 20, 10, 5)
    assert launch.ops == 16  # 10 warmup, the barrier, 5 timed
    changes = [i for i in range(1, 15) if run.ratios[i] != run.ratios[i - 1]]
    # updates before operations 5 and 10 (warmup) and 15 (the last timed one: 11-14 were timed
    # after the barrier, which is operation 10)
    assert changes == [5, 10, 14]
    assert run.timed_from == 10 and len(run.timed) == 5
    single = Launch(Policy(TWO_TO_ONE, 2), mode="single", probe=False).size(1 << 20, 2, 2)
    assert not any(single.hot)


def test_launches_of_a_measured_series():
    from bench.sim.des.launch import launches, parse_size

    assert parse_size("128K") == 131072 and parse_size("4M") == 4 << 20 and parse_size("512") == 512
    sc = {"series": {"nezha-adaptive": {"runs": [
        {"band": "1K-64K", "warmup": 10, "iters": 30, "repeat": 0}, {"band": "1K-64K", "warmup": 10, "iters": 30, "repeat": 1},
        {"band": "128K-4M", "warmup": 10, "iters": 5}]}}}
    assert launches(sc, "nezha-adaptive") == [(1024, 65536, 10, 30), (131072, 4 << 20, 10, 5)]
    assert launches(sc, "nezha-single") == []


def test_measured_split_sizes_reads_where_the_runtime_split():
    from bench.sim.des.validate import measured_split_sizes

    def pt(s, t, hot, r1=0):
        return {"bytes": s, "time_us": t, "hot": hot, "rail_bytes": {"r0": s - r1, "r1": r1}}

    ada = [pt(64 << 10, 100, False), pt(128 << 10, 210, False), pt(256 << 10, 260, True, 64 << 10),
           pt(512 << 10, 500, True, 160 << 10)]
    one = [{"bytes": s, "time_us": t} for s, t in ((64 << 10, 110), (128 << 10, 200), (256 << 10, 400),
                                                     (512 << 10, 800))]
    doc = {"ranks": 2, "scenarios": [{"ranks": 2, "rates_mbit": [200, 100], "series": {
        "nezha-adaptive": {"results": ada}, "nezha-single": {"results": one}}}]}
    m = measured_split_sizes(doc)[2]
    assert m["first_split"] == 256 << 10
    assert m["hot_sizes"] == [256 << 10, 512 << 10]
    assert m["slow_share"][256 << 10] == pytest.approx(0.25)
    assert m["same_plan_spread"] == pytest.approx(0.1)  # 110/100 at 64K, both one rail


def test_fit_suite_fits_each_scenario_at_its_own_rank_count():
    # A suite whose top-level ranks (4) differ from a scenario's (2): the scenario's series must be
    # fitted at 2 ranks, or the ring's 2(N-1)/N bytes per rank skew its efficiency.
    from bench.sim.des.fit import fit_suite

    rate, alpha, eff, line = 500, 60e-6, 0.9, 300e6
    pol = Policy((link_for(rate, alpha, eff, line),), 2)
    res = [{"bytes": s, "time_us": run_op(pol, s).seconds * 1e6} for s in (1 << k for k in range(10, 25))]
    doc = {"ranks": 4, "scenarios": [{"name": "two", "ranks": 2, "rates_mbit": [rate], "best_rail": 0,
                                      "series": {"nezha-single": {"results": res}}}]}
    fit = fit_suite(doc)
    assert fit["rails"][0]["ranks"] == 2
    assert fit["efficiency"] == pytest.approx(eff, rel=0.02)
    assert "2 ranks" in fit["source"]
