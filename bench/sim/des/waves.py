"""A restored rail re-entering mid-operation: waves (runtime/src/failover/failover_engine.cc laterWaves
and finish(), readmission.cc; runtime/README.md "Failover", Re-admission and Waves).

While a failed rail may come back (not alive, not drained), an operation's 4 MiB chunks run in
waves of NEZHA_WAVE_BYTES (8 MiB: 2 chunks) per rail, each ended by the per-op round. Once the
rail's link has been up for the hold-down (0.5 s) the next round says so, and at that boundary
every rank starts the rebuild: one round to agree the new ports, the connections (assumed: two
message exchanges, connect and the authenticated hello), a latency probe (8-byte allreduce) and a
bandwidth probe (NEZHA_PROBE_BYTES, 1 MiB) on the rail; the boundary waits up to 200 ms for it
and decides it in one more round; the rail then takes its share of the rest of the operation
(the rest re-split over the live rails). With NEZHA_WAVE_BYTES=0 the same happens only at an
operation's end, so the restored rail waits for the operation in flight.

share back = restore -> start of the first attempt (wave or operation) that runs on the rail.
The price of waves is one round per wave while a rail is out: at 1,024 ranks with the all-to-all
round that is what wave_overhead shows.
"""

import copy
from dataclasses import dataclass

from . import control
from .collective import RailRun, classes_for, run_alone
from .engine import Engine
from .network import Network
from .op import ROUND_FIELDS, rail_parts
from .scheduler import CHUNK_BYTES, chunked, split_count, to_weights

WAVE_BYTES = 8 << 20  # NEZHA_WAVE_BYTES
HOLDDOWN = 0.5  # NEZHA_READMIT_HOLDDOWN_MS
REBUILD_WAIT = 0.2  # the boundary that starts a rebuild waits this long for it
PROBE_BYTES = 1 << 20  # NEZHA_PROBE_BYTES
CONNECT_EXCHANGES = 2  # assumed: TCP connect, then the authenticated hello


@dataclass
class RestoreResult:
    share_back: float  # restore -> first attempt on the rail again (inf: not within the ops run)
    installed_at: float
    ops: int  # operations run
    wave_rounds: int  # rounds held between waves
    rebuild_seconds: float


def _split_waves(todo, wave_chunks):
    taken, wave, later = {}, [], []
    for c in todo:
        taken[c[0]] = taken.get(c[0], 0) + 1
        (wave if taken[c[0]] <= wave_chunks else later).append(c)
    return wave, later


def _resplit(policy, chunks, ratios):
    """The chunks' units re-split over the live rails by their ratios (Scheduler::resplit), chunked."""
    w = to_weights([(ratios or policy.base)[i] if a else 0.0 for i, a in enumerate(policy.alive)])
    min_units = -(-policy.min_slice // policy.elem)
    out = []
    for _, off, count in sorted(chunks, key=lambda c: c[1]):
        out += [(r, off + o, c) for r, o, c in split_count(count, w, min_units)]
    return chunked(out, policy.elem)


class _Run:
    """One engine and network for a loop of operations (token buckets carry over)."""

    def __init__(self, policy, scheme):
        self.pol, self.scheme = policy, scheme
        self.eng = Engine()
        algos = [("ring", 0), ("rd", 0), (control.algo_for(scheme), 0)]
        self.net = Network(self.eng, policy.links, classes_for(policy.n, algos, policy.fold))
        self.t = 0.0

    def attempt(self, chunks):
        per = rail_parts(self.pol, chunks)
        runs = [RailRun(self.eng, self.net, r, self.pol.n, parts, self.net.classes, tag=("w", self.t, r)).start(self.t)
                for r, (parts, _) in per.items()]
        self.eng.run()
        self.t = max([self.t] + [run.end_time() for run in runs])

    def round(self, doubles=None):
        self.eng.now = max(self.eng.now, self.t)
        rnd = control.start_round(self.eng, self.net, min(self.pol.live()), self.pol.n,
                                  doubles or ROUND_FIELDS * len(self.pol.links), control.changed_round(self.scheme),
                                  tag=("round", self.t))
        self.eng.run()
        self.t = rnd.end_time() if rnd else self.t



def rebuild_time(policy, rail):
    """Seconds of the rebuild on the rail: the connections, then the latency and bandwidth probes."""
    parts = [("rd", 64)] * CONNECT_EXCHANGES + [("rd", 8), (policy.algorithm(rail, PROBE_BYTES), PROBE_BYTES)]
    return run_alone(policy.links, rail, policy.n, parts, policy.fold)


def run_restore(policy, nbytes, down, restore_at, wave_bytes=WAVE_BYTES, scheme="all-to-all", ratios=None,
                max_ops=20):
    """A loop of nbytes operations from t=0 with rail `down` failed; its link comes back at
    restore_at. Returns a RestoreResult."""
    pol = copy.copy(policy)
    pol.alive = list(policy.alive)
    pol.alive[down] = False
    sim = _Run(pol, scheme)
    ready_at = restore_at + HOLDDOWN
    rebuild_end = None
    installed_at = share_back = float("inf")
    wave_rounds = ops = 0
    wave_chunks = max(1, wave_bytes // CHUNK_BYTES)
    rebuild_seconds = 0.0

    def boundary():
        """Re-admission steps at a boundary (the round just held carries the flags)."""
        nonlocal rebuild_end, installed_at, rebuild_seconds
        if pol.alive[down]:
            return False
        if rebuild_end is None and sim.t >= ready_at:
            sim.round()  # agree the new ports
            start = sim.t
            rebuild_seconds = rebuild_time(pol, down)  # the rail is otherwise idle meanwhile
            rebuild_end = start + rebuild_seconds
            sim.t = min(rebuild_end, start + REBUILD_WAIT)  # the boundary waits up to 200 ms
            sim.round()  # decides it
        if rebuild_end is not None and sim.t >= rebuild_end:
            pol.alive[down] = True
            installed_at = sim.t
            return True
        return False

    while ops < max_ops and share_back == float("inf"):
        ops += 1
        todo = chunked(pol.plan(nbytes, ratios, force="hot"), pol.elem)
        later = []
        if wave_bytes and not pol.alive[down]:
            todo, later = _split_waves(todo, wave_chunks)
        while True:
            if any(c[0] == down for c in todo):
                share_back = min(share_back, sim.t - restore_at)
            sim.attempt(todo)
            sim.round()
            changed = boundary()
            if not later:
                break
            wave_rounds += 1
            if changed:
                todo, later = _resplit(pol, later, ratios), []
            else:
                todo, later = _split_waves(later, wave_chunks)
        if share_back == float("inf") and pol.alive[down]:
            share_back = sim.t - restore_at  # the next operation starts on every live rail
    return RestoreResult(share_back, installed_at, ops, wave_rounds, rebuild_seconds)


def op_with_rail_out(policy, nbytes, down, wave_bytes=WAVE_BYTES, scheme="all-to-all"):
    """Seconds of one nbytes operation while rail `down` is out and may return (it does not):
    with waves it holds a round after every wave, without only at its end."""
    pol = copy.copy(policy)
    pol.alive = list(policy.alive)
    pol.alive[down] = False
    sim = _Run(pol, scheme)
    todo = chunked(pol.plan(nbytes, force="hot"), pol.elem)
    later = []
    if wave_bytes:
        todo, later = _split_waves(todo, max(1, wave_bytes // CHUNK_BYTES))
    rounds = 0
    while True:
        sim.attempt(todo)
        sim.round()
        rounds += 1
        if not later:
            return sim.t, rounds
        todo, later = _split_waves(later, max(1, wave_bytes // CHUNK_BYTES))
