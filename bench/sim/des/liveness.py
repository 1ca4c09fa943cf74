"""Heartbeats and the unreachable-peer verdict (runtime/src/failover/control_mesh.cc beat(),
judgeNeighbours(), takeVerdict(), silentPeers(); runtime/README.md "Failover", detection (5)).

Runtime ("neighbours"): every rank's heartbeat thread sends a HERE frame (the
20-byte mesh header, no payload: mesh_frame.cc) every NEZHA_PEER_SILENCE_MS / 5 (100 ms) on every
rail's control connection, but only to its dissemination neighbours (i + 2^k) mod N and
(i - 2^k) mod N, k < ceil(log2 N) (ControlMesh::neighboursOf: at most 2 ceil(log2 N) peers, a
symmetric graph, so a rank watches exactly the ranks that beat to it). A neighbour heard on no
rail for the peer silence (500 ms) is unreachable; the ranks that watch it flood the verdict
(kMeshSilent: the header and the watcher's rank, 24 bytes) over the same graph on every rail:
each rank passes the first copy on to its neighbours but the silent rank and the sender, later
copies stop there. O(log N * rails) messages per rank per second.

"all-to-all" is the earlier runtime, kept for comparison: a HERE frame to every peer on
every rail, each peer judging for itself; (N-1) x rails frames per beat, O(N * rails) per second.

Without heartbeats (NEZHA_PEER_SILENCE_MS=0) every rail of a cut host stands still, nobody's
fault for the watchdog: the slice's no-progress deadline max(floor, 4 x predicted) expires, the
rank asks where the peer is, and nothing answers within the silence window (= floor): ~2 s.

Simulated: the cut host's own frames through the network (its NIC queue serialises its frames
per rail: with all-to-all heartbeats the last peer hears it milliseconds after the first at 1,024
ranks) and the verdict's flood; the other ranks' heartbeats, tiny frames that do not touch the
cut host's, are counted (heartbeat_load) but not simulated. Beat phases differ per rank (a fixed
spread).
"""

import math
import statistics

from . import control
from .engine import Engine
from .network import Network

PEER_SILENCE = 0.5  # NEZHA_PEER_SILENCE_MS
BEAT = PEER_SILENCE / 5  # the heartbeat thread's period
HERE_BYTES = control.frame_bytes(0)  # kMeshHere: header only
VERDICT_BYTES = control.HEADER_BYTES + 4  # kMeshSilent: "rank r is unreachable", the watcher's rank
PROGRESS_FLOOR = 1.0  # NEZHA_PROGRESS_FLOOR_MS: slice deadline floor and the silence window without beats
SCHEMES = ("all-to-all", "neighbours")  # the earlier runtime, the runtime


def log2_ceil(n):
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def neighbours(rank, n):
    """The runtime's heartbeat and verdict graph (ControlMesh::neighboursOf): (rank +- 2^k) mod n,
    k < ceil(log2 n), without duplicates or rank itself."""
    out = set()
    for k in range(log2_ceil(n)):
        out |= {(rank + (1 << k)) % n, (rank - (1 << k)) % n}
    return sorted(out - {rank})


def targets(rank, n, scheme):
    if scheme == "all-to-all":
        return [p for p in range(n) if p != rank]
    if scheme == "neighbours":
        return neighbours(rank, n)
    raise ValueError(f"heartbeat scheme: want one of {', '.join(SCHEMES)}, got {scheme!r}")


def phase(rank):
    """When rank's heartbeat thread ticks within a beat (a fixed, well spread offset)."""
    return (rank * 0.6180339887498949) % 1.0 * BEAT


def heartbeat_load(links, n, scheme):
    """Per rank: heartbeat messages and bytes per second (every rail), and the share of the time
    the sender spends putting one beat's frames out (per-message gap + bytes, all rails in turn:
    one heartbeat thread sends them)."""
    peers = len(targets(0, n, scheme))
    msgs = peers * len(links) / BEAT
    busy = sum(peers * (link.gap + HERE_BYTES * link.beta) for link in links)
    return {"peers": peers, "messages_per_s": msgs, "bytes_per_s": msgs * HERE_BYTES, "sender_busy": busy / BEAT}


def _first_check(rank, t):
    """The first of rank's looks (one per beat, at its phase) at or after t."""
    k = math.ceil((t - phase(rank)) / BEAT - 1e-12)
    return phase(rank) + max(k, 0) * BEAT


def host_cut(links, n, scheme="all-to-all", cut_at=1.0, cut_rank=0):
    """Every rail of cut_rank's host is cut at cut_at; returns, per other rank, the seconds from
    the cut until it knows the host is unreachable (and fails its round), plus the messages the
    verdict cost. No folding: the cut breaks the ranks' symmetry."""
    eng = Engine()
    net = Network(eng, links, n)
    heard = [[None] * n for _ in links]  # per rail, per rank: last HERE from the cut host
    watchers = targets(cut_rank, n, scheme)

    def beat(t):
        for r in range(len(links)):
            for p in watchers:
                net.send(r, cut_rank, p, HERE_BYTES, lambda: None, lambda r=r, p=p: _heard(r, p))

    def _heard(r, p):
        heard[r][p] = eng.now

    t = phase(cut_rank)
    while t < cut_at:
        eng.at(t, beat, t)
        t += BEAT
    net.fail_rank(cut_rank, cut_at)
    eng.run()
    known = {}
    for p in watchers:
        last = max((h[p] for h in heard if h[p] is not None), default=0.0)
        known[p] = _first_check(p, last + PEER_SILENCE)
    notices = 0
    if scheme == "neighbours":  # the watchers flood the verdict to everyone else, on every rail
        learned = {}
        eng2 = Engine()
        net2 = Network(eng2, links, n)
        net2.fail_rank(cut_rank, cut_at)

        def tell(src, sender):
            nonlocal notices
            for q in neighbours(src, n):
                if q in (cut_rank, sender):
                    continue
                for rail in range(len(links)):
                    notices += 1
                    net2.send(rail, src, q, VERDICT_BYTES, lambda: None, lambda q=q, src=src: learn(q, src))

        def learn(q, sender):  # takeVerdict: the first copy is taken and passed on, the rest stop
            if q not in learned:
                learned[q] = eng2.now
                tell(q, sender)

        def judge(p):  # judgeNeighbours: no flood of its own if one already passed here
            if p not in learned:
                learned[p] = eng2.now
                tell(p, None)

        for p, t_known in known.items():
            eng2.at(t_known, judge, p)
        eng2.run()
        known = learned
    others = [p for p in range(n) if p != cut_rank]
    if any(p not in known for p in others):
        raise RuntimeError("a rank never learned that the cut host is unreachable")
    after = [known[p] - cut_at for p in others]
    return {"max_s": max(after), "median_s": statistics.median(after), "min_s": min(after),
            "verdict_messages": notices, "verdict_messages_per_rank": notices / len(others)}


def host_cut_sweep(links, n, scheme, cuts=5):
    """host_cut at `cuts` instants spread over one beat (the cut's phase against the beats
    matters at small N); the worst and the median over all of them."""
    runs = [host_cut(links, n, scheme, cut_at=1.0 + j * BEAT / cuts) for j in range(cuts)]
    return {"max_s": max(r["max_s"] for r in runs), "median_s": statistics.median(r["median_s"] for r in runs),
            "min_s": min(r["min_s"] for r in runs), "verdict_messages": max(r["verdict_messages"] for r in runs),
            "verdict_messages_per_rank": max(r["verdict_messages_per_rank"] for r in runs)}


def without_heartbeats():
    """Seconds from a host cut to its peers' error with heartbeats off: the slice's no-progress
    deadline (its floor, for operations predicted under 250 ms a chunk), then a whole silence
    window (= the floor) for the unanswered "where are you?"."""
    return PROGRESS_FLOOR + PROGRESS_FLOOR
