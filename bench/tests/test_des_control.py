"""The simulator's control plane (bench/sim/des): the dissemination max (any N), round traffic
per rank, round-free small operations, heartbeats and a host losing every rail, waves."""

import math
import random

import pytest

from bench.sim.des import algorithms, control, liveness, waves
from bench.sim.des.collective import run_alone
from bench.sim.des.engine import Engine
from bench.sim.des.failover import run_failover
from bench.sim.des.network import Link, Network
from bench.sim.des.op import run_op
from bench.sim.des.roundfree import CONFIRM_EVERY, loop_seconds, skips_round
from bench.sim.des.scheduler import Policy, chunked

A, B, G = 50e-6, 1 / 100e6, 10e-6
RAIL = Link("r", A, B, G)
TWO = (Link("a", A, 1 / 100e6, G), Link("b", A, 1 / 100e6, G))


def _log2(n):
    return math.ceil(math.log2(n)) if n > 1 else 0


@pytest.mark.parametrize("n", list(range(1, 70)) + [100, 1000, 1023, 1024])
def test_dissemination_gives_every_rank_the_max_for_any_n(n):
    rng = random.Random(n)
    for _ in range(3):
        values = [rng.random() for _ in range(n)]
        assert algorithms.dissemination_max(values) == [max(values)] * n


def test_dissemination_max_needs_every_step():
    # one step fewer leaves some rank without the max (the max sits at one rank only)
    n = 13
    values = [0.0] * n
    values[5] = 1.0
    cur, k = list(values), 1
    while 2 * k < n:
        cur = [max(cur[i], cur[(i - k) % n]) for i in range(n)]
        k *= 2
    assert min(cur) == 0.0
    assert algorithms.dissemination_max(values) == [1.0] * n


@pytest.mark.parametrize("n", [2, 3, 5, 6, 12, 33])
def test_dissemination_program_pattern_and_counts(n):
    expect, got = {}, {}
    for r in range(n):
        steps = algorithms.program("dis", r, n, 100)
        assert len(steps) == _log2(n)
        for i, (tag, sends, nrecv) in enumerate(steps):
            assert sends == [((r + (1 << i)) % n, 100)] and nrecv == 1
            expect[(r, tag)] = nrecv
            got[(sends[0][0], tag)] = got.get((sends[0][0], tag), 0) + 1
    assert expect == got  # every message finds its receiver
    assert run_alone([RAIL], 0, n, [("dis", 100)], fold=0) == pytest.approx(_log2(n) * (G + A + 100 * B), rel=1e-12)


def test_dissemination_folds_exactly_for_any_n_the_fold_divides():
    for n in (12, 16, 1000):
        full = run_alone([RAIL], 0, n, [("dis", 132)], fold=0)
        assert run_alone([RAIL], 0, n, [("dis", 132)], fold=2) == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize("n", [2, 7, 16, 100, 1024])
def test_round_traffic_per_rank(n):
    frame = control.frame_bytes(14)
    secs, msgs, nbytes = control.round_traffic([RAIL], 0, n, 14, "all-to-all")
    assert (msgs, nbytes) == (n - 1, (n - 1) * frame)
    secs_d, msgs_d, nbytes_d = control.round_traffic([RAIL], 0, n, 14, "dissemination")
    assert (msgs_d, nbytes_d) == (_log2(n), _log2(n) * frame)
    assert secs_d == pytest.approx(_log2(n) * (G + A + frame * B), rel=1e-12)
    if n >= 100:
        assert secs > 2 * secs_d  # the all-to-all pays N-1 sends on one NIC (at 16 it is still faster)
    assert control.round_traffic([RAIL], 0, n, 14, "epoch", changed=False) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="unknown agreement scheme"):
        control.algo_for("gossip")


def test_round_free_rules_follow_the_runtime():
    pol = Policy(TWO, 4, cold_threshold=1 << 20)
    held = [k for k in range(1, 50) if not skips_round(pol, 1024, k)]
    assert held == [1, 17, 33, 49]  # every 16th operation confirms
    assert skips_round(pol, 64 << 10, 2) and not skips_round(pol, (64 << 10) + 4, 2)  # up to 64 KiB
    assert not skips_round(pol, 1024, 2, round_free_bytes=0)
    hot = Policy(TWO, 4, cold_threshold=32 << 10)
    assert not skips_round(hot, 64 << 10, 2)  # a split operation holds its round
    assert not skips_round(Policy(TWO, 1), 1024, 2)
    pol.alive[1] = False
    assert not skips_round(pol, 1024, 2)  # only while every rail is alive


def test_round_free_loop_pays_one_round_in_sixteen():
    pol = Policy(TWO, 64, cold_threshold=1 << 20)
    held = run_op(pol, 1024).seconds
    free = run_op(pol, 1024, hold_round=False).seconds
    assert held - free == pytest.approx(run_op(pol, 1024).agreement_seconds)
    mean, skipped = loop_seconds(pol, 1024)
    assert skipped == CONFIRM_EVERY - 1
    assert mean == pytest.approx(((CONFIRM_EVERY - 1) * free + held) / CONFIRM_EVERY, rel=1e-12)
    assert loop_seconds(pol, 1024, round_free_bytes=0) == (pytest.approx(held), 0)
    assert loop_seconds(pol, 1 << 20)[1] == 0  # above 64 KiB: a round every operation


def test_heartbeat_load_counts():
    for n in (2, 5, 16, 1024):
        a = liveness.heartbeat_load(TWO, n, "all-to-all")
        assert a["messages_per_s"] == pytest.approx((n - 1) * 2 / 0.1)
        assert a["bytes_per_s"] == pytest.approx(a["messages_per_s"] * 20)
        nb = liveness.heartbeat_load(TWO, n, "neighbours")
        assert nb["peers"] == len(liveness.neighbours(0, n)) <= 2 * _log2(n)
        assert nb["messages_per_s"] == pytest.approx(nb["peers"] * 2 / 0.1)
    # the runtime's ControlMesh::neighboursOf (control_mesh_test checks the same sets)
    assert liveness.neighbours(0, 16) == [1, 2, 4, 8, 12, 14, 15]
    assert liveness.neighbours(3, 16) == [1, 2, 4, 5, 7, 11, 15]
    assert liveness.neighbours(0, 8) == [1, 2, 4, 6, 7]
    assert liveness.neighbours(3, 5) == [0, 1, 2, 4]  # 3+-1, 3+-2, 3+-4 mod 5
    assert liveness.neighbours(0, 2) == [1]
    for n in (3, 6, 100):  # symmetric: a rank watches exactly the ranks that beat to it
        for r in range(n):
            assert all(r in liveness.neighbours(p, n) for p in liveness.neighbours(r, n))
    with pytest.raises(ValueError, match="heartbeat scheme"):
        liveness.targets(0, 4, "gossip")


def test_a_cut_host_drops_only_its_own_messages():
    eng, got = Engine(), []
    net = Network(eng, [RAIL], 3)
    net.fail_rank(0, 1.0)
    for src, dst in ((0, 1), (1, 0), (1, 2)):
        eng.at(2.0, net.send, 0, src, dst, 100, lambda: None, lambda s=src, d=dst: got.append((s, d)))
    net.send(0, 0, 1, 100, lambda: None, lambda: got.append("before"))
    eng.run()
    assert got == ["before", (1, 2)]


@pytest.mark.parametrize("n", [2, 9, 64])
def test_host_cut_every_peer_knows_after_the_silence_and_within_a_beat_more(n):
    r = liveness.host_cut(TWO, n, "all-to-all", cut_at=1.03)
    # the last beat heard left at most a beat before the cut: no verdict before silence - beat
    assert r["min_s"] >= liveness.PEER_SILENCE - liveness.BEAT
    assert r["max_s"] <= liveness.PEER_SILENCE + liveness.BEAT + 0.01
    w = liveness.host_cut(TWO, n, "neighbours", cut_at=1.03)
    assert w["max_s"] <= liveness.PEER_SILENCE + liveness.BEAT + 0.01
    if n > 2:
        assert w["verdict_messages"] > 0  # the watchers told the others
    # each rank passes the verdict on once, to its neighbours on every rail: O(log N) per rank
    assert w["verdict_messages_per_rank"] <= 2 * len(liveness.neighbours(0, n))


def test_host_cut_verdict_floods_past_the_dead_rank_for_any_n():
    for n in (3, 33, 100):
        r = liveness.host_cut(TWO, n, "neighbours", cut_at=1.0, cut_rank=n // 2)
        assert r["max_s"] < 1.0  # host_cut raises if a rank never learns it


def test_waves_let_a_restored_rail_back_mid_operation():
    pol = Policy(TWO, 2)
    op, rounds = waves.op_with_rail_out(pol, 64 << 20, 1, 0)
    waved, wave_rounds = waves.op_with_rail_out(pol, 64 << 20, 1)
    survivor_chunks = len(chunked(Policy(TWO[:1], 2).plan(64 << 20, force="hot"), 4))
    assert rounds == 1 and wave_rounds == math.ceil(survivor_chunks / 2)  # 8 MiB = 2 chunks a wave
    assert waved > op  # a round per wave costs something
    restore = 2 * op + 0.1 * op  # early in an operation
    on = waves.run_restore(pol, 64 << 20, 1, restore)
    off = waves.run_restore(pol, 64 << 20, 1, restore, wave_bytes=0)
    assert on.share_back >= waves.HOLDDOWN + on.rebuild_seconds
    # with waves: back at the first wave boundary after the hold-down (a wave is an eighth of an op)
    assert on.share_back <= waves.HOLDDOWN + on.rebuild_seconds + op / 8 + 0.01
    # without: the operation in flight when the hold-down ends runs to its end
    assert off.share_back >= 3 * op - restore
    assert on.share_back < off.share_back
    assert on.wave_rounds > 0 and off.wave_rounds == 0


def test_failover_with_dissemination_rounds_replays_the_same_and_sends_less():
    a2a = run_failover(Policy(TWO, 64), 16 << 20, [0.5, 0.5], 1, 0.5, "link event")
    dis = run_failover(Policy(TWO, 64), 16 << 20, [0.5, 0.5], 1, 0.5, "link event", scheme="dissemination")
    assert dis.redo_chunks == a2a.redo_chunks and dis.replayed_units == a2a.replayed_units
    assert dis.retire_round < a2a.retire_round and dis.agree_round < a2a.agree_round
    # agreement + retire rounds: 6 messages each per rank, frames of 14 and 65 doubles
    assert dis.control_bytes == pytest.approx(6 * (control.frame_bytes(14) + control.frame_bytes(65)))


def _fake_results():
    ns = (2, 4, 16, 128, 1000, 1024)
    tr = {n: {"all-to-all": {"seconds": 1e-5 * n, "messages": n - 1, "bytes": 132 * (n - 1)},
              "tree": {"seconds": 1e-4 * _log2(n), "messages": _log2(n), "bytes": 132 * _log2(n)},
              "dissemination": {"seconds": 1e-4 * _log2(n), "messages": _log2(n), "bytes": 132 * _log2(n)}}
          for n in ns}
    hb = {n: {s: liveness.heartbeat_load(TWO, n, s) for s in liveness.SCHEMES} for n in (2, 4, 16, 128, 1024)}
    cut = {n: {"all-to-all": {"max_s": 0.59, "median_s": 0.5, "min_s": 0.4, "verdict_messages": 0,
                              "verdict_messages_per_rank": 0},
               "neighbours": {"max_s": 0.5, "median_s": 0.45, "min_s": 0.4, "verdict_messages": 10 * n,
                              "verdict_messages_per_rank": 10.0},
               "off": {"max_s": 2.0, "median_s": 2.0, "min_s": 2.0, "verdict_messages": 0,
                       "verdict_messages_per_rank": 0}} for n in (2, 16, 1024)}
    small = {n: {"all-to-all": 2.0, "all-to-all, round-free": 1.1, "dissemination, round-free": 1.01} for n in (4, 128, 1024)}
    fo = {f"N=1024, {k}, {s}": {"fail_at_s": 1.0, "detected_at_s": 1.001, "agree_round_s": 0.01, "retire_round_s": 0.1,
                                 "replay_s": 1.2, "replay_round_s": 0.01, "stall_s": 1.4, "control_bytes_per_rank": 8e6}
          for k in ("link event", "black hole") for s in ("all-to-all", "dissemination")}
    return {"agreement_traffic": tr, "heartbeats": hb, "host_cut": cut, "small_op_over_no_round": small,
            "restore_bed": {"op_while_cut_s": 0.74, "rebuild_s": 0.028, "waves": {"mean_s": 0.6, "min_s": 0.53, "max_s": 0.62},
                            "off": {"mean_s": 0.84, "min_s": 0.53, "max_s": 1.17}},
            "wave_cost": {1024: {s: {"plain_s": 5.0, "waves_s": 5.09, "rounds": 8} for s in ("all-to-all", "dissemination")}},
            "failover": fo}


def test_control_report_judges_all_to_all_miss_and_dissemination_pass():
    from bench.sim.des import control_report

    res = _fake_results()
    verdicts = {name.split(" — ")[1].split(" (")[0]: ok for name, ok, _ in control_report.checks(res) if " — " in name}
    assert verdicts == {"all-to-all round": False, "dissemination round": True, "all-to-all": False,
                        "neighbours": True}
    cut_checks = [ok for name, ok, _ in control_report.checks(res) if "loses every rail" in name]
    assert cut_checks == [True, True]
    text = "\n".join(control_report.lines(res, {"rel": "x.json", "after": {"all_down_peer_s": [0.61]},
                                                 "before": {"all_down_peer_s": [1.9]}}))
    assert "- MISS control goal: agreement messages per rank per operation" in text
    assert "- PASS control goal: agreement messages per rank per operation" in text
    assert "| 1000 |" in text and "0.61 s after the cut" in text
    assert "dissemination round (the runtime's round" in text  # the runtime's round
    assert "all-to-all round (the runtime's older round" in text
    # heartbeats: the runtime's neighbours PASS, all-to-all (the earlier runtime) MISS
    assert "- PASS control goal: heartbeat messages per rank per second O(log N), not O(N) — neighbours (runtime" in text
    assert "- MISS control goal: heartbeat messages per rank per second O(log N), not O(N) — all-to-all (the older" in text
    assert control_report.grows_like_log({2: 1, 4: 3, 1024: 1023})[0] is False
    assert control_report.grows_like_log({2: 1, 4: 2, 1024: 10})[0] is True
