"""One benchmark launch replayed operation by operation on one simulated network, so the test
bed's token buckets carry over from each operation (and from the probe) to the next.

op.run_op prices an operation in the steady state of a long loop (buckets full, or empty when
the loop sends more than the rate refills). A benchmark launch is not that: nezha-bench probes
the rails (two 1 MiB allreduces per rail, one rail after the other: probe.cc), then runs each
size `warmup + iters` times from the probe's ratios, and the tuner updates the split every
TUNE_INTERVAL operations from the rail times it saw. Right after the probe the last-probed
rail's bucket is empty and the others have refilled while it was probed; a rail left out of
the split at one size starts the next one with a full bucket. On the bed's 2:1 rails the first
tuner interval of the first size (128 KiB) therefore sees the slow rail at its shaped rate and
the fast one at line speed, cuts the slow rail's share under the 32 KiB minimum slice, and the
size runs whole on one rail (the rank logs of `bench/sim/measure.py` with NEZHA_VERBOSE=1 show
exactly that first update).

The tuner follows Scheduler::record/applyAgreed and Impl::beginOp: per size (table bucket) it
sums each rail's bytes and seconds over the operations since the last agreement, and before
every TUNE_INTERVAL-th operation of the launch (the barrier between warmup and timing counts as
one, so the agreements drift against the sizes) every entry with pending operations is updated;
a plan with one slice only moves that rail's bytes, which leaves the ratios as they are
(tuneRatios over the rails that ran), and a starved rail is re-probed only after
kFirstProbeWait agreements (20 operations), later than one size of a benchmark launch.
"""

from dataclasses import dataclass, field

from . import control
from .collective import RailRun
from .engine import Engine
from .network import Network
from .op import ROUND_FIELDS, rail_parts
from .scheduler import chunked, tune_ratios

TUNE_INTERVAL = 5  # NEZHA_TUNE_INTERVAL: operations per tuner update
PROBE_BYTES = 1 << 20  # NEZHA_PROBE_BYTES
PROBE_ROUNDS = 2  # probe.cc kBandwidthRounds


@dataclass
class SizeRun:
    nbytes: int
    op_seconds: list = field(default_factory=list)  # every operation, warmup first
    hot: list = field(default_factory=list)
    ratios: list = field(default_factory=list)  # the split each operation was planned with
    timed_from: int = 0

    @property
    def timed(self):
        return self.op_seconds[self.timed_from:]

    @property
    def mean_timed(self):
        t = self.timed
        return sum(t) / len(t)


class Launch:
    """A benchmark launch on `policy`'s rails: one engine and one network for all of it."""

    def __init__(self, policy, scheme="all-to-all", mode="adaptive", probe=True):
        if mode not in ("adaptive", "single"):
            raise ValueError(f"mode: want adaptive or single, got {mode!r}")
        self.pol, self.scheme, self.mode = policy, scheme, mode
        self.eng = Engine()
        self.net = Network(self.eng, policy.links, policy.n)  # buckets full: the launch starts idle
        self.ops = 0  # Impl::opCounter
        self.tags = 0
        self.table = {}  # size -> the tuner's entry: ratios and the stats pending since the last agreement
        if probe:
            self._probe()

    def _run(self, rail, parts):
        self.tags += 1
        run = RailRun(self.eng, self.net, rail, self.pol.n, parts, self.pol.n, tag=("launch", self.tags))
        return run.start(self.eng.now)

    def _round(self):
        rnd = control.start_round(self.eng, self.net, min(self.pol.live()), self.pol.n,
                                  ROUND_FIELDS * len(self.pol.links), self.scheme, False,
                                  tag=("round", self.tags), classes=self.pol.n)
        self.tags += 1
        self.eng.run()
        if rnd is not None:
            self.eng.now = max(self.eng.now, rnd.end_time())

    def _probe(self):
        """probe.cc: bandwidth rounds rail by rail (the latency rounds move a few bytes)."""
        for r in range(len(self.pol.links)):
            for _ in range(PROBE_ROUNDS):
                run = self._run(r, [(self.pol.algorithm(r, PROBE_BYTES), PROBE_BYTES)])
                self.eng.run()
                self.eng.now = max(self.eng.now, run.end_time())
        self._round()  # agreeMax of the probe's times

    def _begin(self):
        """Impl::beginOp: the operation's number, and before every TUNE_INTERVAL-th the timing
        agreement (two rounds) that updates every table entry with pending operations."""
        n = self.ops
        self.ops += 1
        if n == 0 or n % TUNE_INTERVAL:
            return
        due = [e for e in self.table.values() if e["pending"]]
        for e in due:
            e["ratios"] = tune_ratios(e["ratios"], e["bytes"], e["seconds"], self.pol.gain)
            e["bytes"], e["seconds"], e["pending"] = [0.0] * len(e["bytes"]), [0.0] * len(e["bytes"]), 0
        if due:
            self._round()
            self._round()

    def barrier(self):
        """nezha-bench's barrier between warmup and timing: an operation of its own (it counts)."""
        self._begin()
        self._round()

    def op(self, nbytes):
        """One allreduce from now: (seconds, hot, the ratios it was planned with)."""
        pol = self.pol
        self._begin()
        entry = self.table.get(nbytes)
        ratios = list(entry["ratios"]) if entry else list(pol.base)
        if self.mode == "single":
            best = max(range(len(pol.links)), key=lambda i: (pol.bw[i], -i))
            slices = [(best, 0, nbytes // pol.elem)]
        else:
            slices = pol.plan(nbytes, ratios)
        per = rail_parts(pol, chunked(slices, pol.elem))
        t0 = self.eng.now
        runs = {r: self._run(r, parts) for r, (parts, _) in per.items()}
        self.eng.run()
        nr = len(pol.links)
        secs, nb = [0.0] * nr, [0] * nr
        for r, run in runs.items():
            secs[r] = run.end_time() - t0
            nb[r] = sum(c for _, _, c in per[r][1]) * pol.elem
        self.eng.now = max([self.eng.now] + [t0 + s for s in secs])
        self._round()
        if (self.mode == "adaptive" and nbytes >= pol.threshold and pol.splittable(nbytes)
                and len(pol.live()) > 1):  # Scheduler::plan tables it, Scheduler::record counts it
            e = self.table.setdefault(nbytes, {"ratios": list(pol.base), "bytes": [0.0] * nr,
                                               "seconds": [0.0] * nr, "pending": 0})
            e["bytes"] = [a + b for a, b in zip(e["bytes"], nb)]
            e["seconds"] = [a + (s if b else 0.0) for a, s, b in zip(e["seconds"], secs, nb)]
            e["pending"] += 1
        return self.eng.now - t0, len(slices) > 1, ratios

    def size(self, nbytes, warmup, iters):
        """nezha-bench at one size: `warmup` operations, a barrier, `iters` timed operations
        (each size is its own table entry, starting from the probe's ratios)."""
        out = SizeRun(nbytes, timed_from=warmup)
        for i in range(warmup + iters):
            if i == warmup:
                self.barrier()
            secs, hot, ratios = self.op(nbytes)
            out.op_seconds.append(secs)
            out.hot.append(hot)
            out.ratios.append(ratios)
        return out


def replay(policy, sizes, warmup, iters, mode="adaptive", scheme="all-to-all"):
    """{size: SizeRun} for one launch over `sizes` (ascending, as nezha-bench runs them)."""
    launch = Launch(policy, scheme, mode)
    return {s: launch.size(s, warmup, iters) for s in sorted(sizes)}


def parse_size(text):
    """"128K" -> 131072 (the band names of a suite result's runs)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text and text[-1] in mult else int(text)


def launches(scenario, series_name):
    """The launches a measured series ran: [(lo, hi, warmup, iters)], one per band (repeats of
    a band are the same launch again)."""
    out = []
    for run in scenario.get("series", {}).get(series_name, {}).get("runs", []):
        lo, _, hi = run.get("band", "").partition("-")
        try:
            key = (parse_size(lo), parse_size(hi), int(run["warmup"]), int(run["iters"]))
        except (KeyError, ValueError):
            continue
        if key not in out:
            out.append(key)
    return out
