"""The runtime's scheduling rules, for the simulator (runtime/src/schedule/, failover.cc).

  probe        per rail: latency = a recursive-doubling allreduce of 8 bytes, bandwidth = 1 MiB
               over (a 1 MiB allreduce - latency), both run on the simulated rail (probe.cc)
  threshold    autoColdThreshold (tuner.cc): the smallest power of two >= 16 KiB where
               max(lat) + S/sum(bw) < min_i(lat_i + S/bw_i)
  cold         bytes < threshold, or too few bytes for two 32 KiB slices: the whole operation
               on argmin_i lat_i + S/bw_i
  hot          split by the table entry's ratios (toWeights + splitCount, slices >= 32 KiB)
  tuner        tuneRatios: each rail's share moves `gain` of the way to bytes/seconds
  chunking     each slice runs as min(16, bytes / 4 MiB) chunks in order on its rail
  algorithm    per slice: "runtime" = chooseAllreduce (rd below 64 KiB, ring above), or "best" =
               the fastest of ring, rd, rhd, tree for that slice (what per-op tuning tables pick)
"""

from functools import lru_cache

from . import algorithms
from .collective import DEFAULT_FOLD, run_alone

WEIGHT_SCALE = 1 << 16  # split.h kWeightScale
CHUNK_BYTES = 4 << 20  # failover.cc kChunkBytes
MAX_CHUNKS = 16  # failover.cc kMaxChunksPerSlice


def to_weights(ratios):
    s = sum(ratios)
    if s <= 0 or any(r < 0 for r in ratios):
        raise ValueError(f"bad ratios {ratios}")
    w = [int(r / s * WEIGHT_SCALE) for r in ratios]
    largest = max(range(len(ratios)), key=lambda i: (ratios[i], -i))
    w[largest] += WEIGHT_SCALE - sum(w)
    return w


def split_count(count, weights, min_count):
    """splitCount: [(rail, offset, count)], the smallest-weight rail dropped while its share is
    under min_count."""
    if count == 0:
        return []
    w = list(weights)
    while True:
        total = sum(w)
        if total <= 0:
            raise ValueError("no rail has weight")
        if sum(1 for x in w if x > 0) == 1:
            break
        victim = -1
        for i, x in enumerate(w):
            if x and count * x // total < max(min_count, 1) and (victim < 0 or x <= w[victim]):
                victim = i
        if victim < 0:
            break
        w[victim] = 0
    total = sum(w)
    out, cum, prev = [], 0, 0
    for i, x in enumerate(w):
        if not x:
            continue
        cum += x
        b = count * cum // total
        if b > prev:
            out.append((i, prev, b - prev))
        prev = b
    assert prev == count
    return out


def chunked(slices, unit_bytes):
    """failover.cc chunked(): each slice as up to 16 chunks of about 4 MiB, in order."""
    out = []
    for rail, off, count in slices:
        k = min(MAX_CHUNKS, max(1, count * unit_bytes // CHUNK_BYTES), max(1, count))
        for i in range(k):
            b, e = count * i // k, count * (i + 1) // k
            if e > b:
                out.append((rail, off + b, e - b))
    return out


def tune_ratios(current, nbytes, seconds, gain):
    rate = [b / s if b > 0 and s > 0 else 0.0 for b, s in zip(nbytes, seconds)]
    rate_sum = sum(rate)
    used = sum(c for c, r in zip(current, rate) if r > 0)
    if rate_sum <= 0 or used <= 0:
        return list(current)
    nxt = [(1 - gain) * c + gain * used * r / rate_sum if r > 0 else c for c, r in zip(current, rate)]
    s = sum(nxt)
    return [x / s for x in nxt]


def auto_cold_threshold(lat, bw, lo=16 << 10, hi=1 << 30):
    if len(lat) == 1:
        return hi
    s = lo
    while s < hi:
        cold = min(l + s / b for l, b in zip(lat, bw) if b > 0)
        if max(lat) + s / sum(bw) < cold:
            return s
        s *= 2
    return hi


class Policy:
    """Per-job scheduling state: probe, threshold, algorithm choice (identical on every rank)."""

    def __init__(self, links, n, algo="runtime", elem=4, min_slice=32 << 10, ring_threshold=64 << 10,
                 cold_threshold=None, gain=0.6, split_cost=0.0, fold=DEFAULT_FOLD):
        if algo not in ("runtime", "best"):
            raise ValueError(f"algo: want runtime or best, got {algo!r}")
        self.links, self.n, self.algo, self.elem = tuple(links), n, algo, elem
        self.min_slice, self.ring_threshold, self.gain = min_slice, ring_threshold, gain
        self.split_cost = split_cost  # seconds a hot operation pays for its extra rail threads
        self.fold = fold  # rank classes simulated for symmetric algorithms (collective.py)
        self.alive = [True] * len(self.links)
        self.lat, self.bw = self.probe()
        self.threshold = cold_threshold if cold_threshold is not None else auto_cold_threshold(self.lat, self.bw)
        self.base = [b / sum(self.bw) for b in self.bw]

    # algorithm per slice ---------------------------------------------------------------------
    def algorithm(self, rail, nbytes):
        if self.algo == "runtime":
            return algorithms.runtime_choice(self.n, nbytes, self.elem, self.ring_threshold)
        return _best(self.links, rail, self.n, nbytes, self.fold)

    def rail_seconds(self, rail, nbytes):
        """One slice of nbytes alone on `rail`, chunked as the runtime runs it."""
        return run_alone(self.links, rail, self.n, self.parts(rail, nbytes), self.fold)

    def parts(self, rail, nbytes):
        units = nbytes // self.elem
        return [(self.algorithm(rail, c * self.elem), c * self.elem) for _, _, c in chunked([(rail, 0, units)], self.elem)]

    def probe(self):
        lat, bw = [], []
        for r in range(len(self.links)):
            t_lat = run_alone(self.links, r, self.n, [("rd", 8)], self.fold)
            t_bulk = run_alone(self.links, r, self.n, [(self.algorithm(r, 1 << 20), 1 << 20)], self.fold)
            lat.append(t_lat)
            bw.append((1 << 20) / max(t_bulk - t_lat, 1e-7))
        return lat, bw

    # planning --------------------------------------------------------------------------------
    def live(self):
        return [i for i, a in enumerate(self.alive) if a]

    def cold_rail(self, nbytes):
        return min(self.live(), key=lambda i: (self.lat[i] + nbytes / self.bw[i], i))

    def splittable(self, nbytes):
        """Room for two minimum slices (scheduler.cc): below it the runtime runs an operation
        above the threshold cold too, with no table entry."""
        return nbytes // self.elem >= 2 * -(-self.min_slice // self.elem)

    def plan(self, nbytes, ratios=None, force=None):
        """[(rail, offset_units, units)] of one allreduce; force = "cold" | "hot" overrides the
        threshold (to price both sides of it)."""
        units = nbytes // self.elem
        hot = nbytes >= self.threshold and self.splittable(nbytes) if force is None else force == "hot"
        if not hot or len(self.live()) == 1:
            return [(self.cold_rail(nbytes), 0, units)] if units else []
        r = [x if self.alive[i] else 0.0 for i, x in enumerate(ratios or self.base)]
        return split_count(units, to_weights(r), -(-self.min_slice // self.elem))


@lru_cache(maxsize=4096)
def _best(links, rail, n, nbytes, fold):
    return min(algorithms.ALGORITHMS, key=lambda a: run_alone(links, rail, n, [(a, nbytes)], fold))
