"""Analytic alpha-beta model of Nezha's scheduler on N ranks (the simulator's core).

Every cost is in seconds, every size in bytes. A rail is (alpha, beta): the latency of one
message step and the time per byte of its bandwidth term (beta folds the reduction's CPU cost in,
as the fit to the test bed does). Nothing here measures anything; params.py fits the rails to
benchmark results, run_sim.py sweeps and plots.

What is modelled, in the order the runtime does it for one allreduce of S bytes:
  1. the per-operation rail agreement (how the ranks agree which rails are in use),
  2. cold start: the whole message on the best single rail (Nezha v2 Eq. 4), or
     hot start: S split over the rails so they finish together (Eq. 5), plus a fixed split cost,
  3. on each rail the best of ring, recursive halving/doubling, binomial tree and recursive
     doubling for its share and N,
and, on a rail failure, detection + one agreement round + replay of the lost share on the
survivors.
"""

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "rhd", "tree", "rd")


@dataclass(frozen=True)
class Rail:
    name: str
    alpha: float  # seconds per message step
    beta: float  # seconds per byte

    def __post_init__(self):
        if not (self.alpha >= 0 and self.beta > 0):
            raise ValueError(f"rail {self.name}: alpha must be >= 0 and beta > 0 (got {self.alpha}, {self.beta})")


def _log2_ceil(n):
    return max(0, math.ceil(math.log2(n)))


def algorithm_terms(algo, n):
    """(A, B) with cost = A*alpha + B*size*beta for one allreduce on n ranks."""
    if n < 1:
        raise ValueError(f"ranks must be >= 1, got {n}")
    if n == 1:
        return 0.0, 0.0
    if algo == "ring":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if algo == "rhd":
        # Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather on the
        # largest power of two p <= n; the n - p extra ranks fold in and out with a full-vector
        # exchange each way.
        p = 1 << int(math.floor(math.log2(n)))
        a, b = 2.0 * math.log2(p), 2.0 * (p - 1) / p
        if p != n:
            a, b = a + 2.0, b + 2.0
        return a, b
    if algo == "tree":
        # binomial reduce then broadcast of the whole vector
        k = _log2_ceil(n)
        return 2.0 * k, 2.0 * k
    if algo == "rd":
        # recursive doubling on the whole vector (the small-message algorithm), same fold-in
        # for non-powers of two
        p = 1 << int(math.floor(math.log2(n)))
        a = b = math.log2(p)
        if p != n:
            a, b = a + 2.0, b + 2.0
        return a, b
    raise ValueError(f"unknown algorithm {algo!r} (want one of {', '.join(ALGORITHMS)})")


def algorithm_time(algo, rail, n, size):
    a, b = algorithm_terms(algo, n)
    return a * rail.alpha + b * size * rail.beta


def best_algorithm(rail, n, size, algorithms=ALGORITHMS):
    """(time, algorithm) of the fastest algorithm for this size on this rail."""
    return min((algorithm_time(a, rail, n, size), a) for a in algorithms)


def bytes_within(rail, n, t, algorithms=ALGORITHMS):
    """The most bytes the rail reduces within t seconds with its best algorithm (0 if none fits)."""
    best = 0.0
    for algo in algorithms:
        a, b = algorithm_terms(algo, n)
        if b == 0:
            continue
        s = (t - a * rail.alpha) / (b * rail.beta)
        best = max(best, s)
    return best


def hot_split(rails, n, size, algorithms=ALGORITHMS):
    """Shares (fractions summing to 1) that make every used rail finish together, and that time.

    Water filling: the finishing time T solves sum_i bytes_within(rail_i, T) = size (monotone in
    T), found by bisection; a rail too slow to carry anything by T gets no share.
    """
    if size <= 0:
        return [1.0] + [0.0] * (len(rails) - 1), 0.0
    lo, hi = 0.0, min(best_algorithm(r, n, size, algorithms)[0] for r in rails)
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(bytes_within(r, n, mid, algorithms) for r in rails) >= size:
            hi = mid
        else:
            lo = mid
    caps = [bytes_within(r, n, hi, algorithms) for r in rails]
    total = sum(caps)
    return [c / total for c in caps], hi


@dataclass(frozen=True)
class Agreement:
    """How the ranks agree each operation's rail set.

    all-to-all: every rank sends its vector to every peer (the runtime's control-mesh round
      before the dissemination round; it now runs one, ceil(log2 n) steps like `tree` here): one
      latency plus a per-message cost for each of the n - 1 peers.
    tree: recursive doubling of the max, log2(n) steps.
    epoch: a rail-set epoch in the slice headers; no round unless the set changes (then one tree
      round).
    """

    scheme: str  # "all-to-all", "tree" or "epoch"
    alpha: float  # latency of one control message step
    per_message: float  # sender CPU per control message

    def per_op(self, n, changed=False):
        if n <= 1:
            return 0.0
        if self.scheme == "all-to-all":
            return self.alpha + (n - 1) * self.per_message
        steps = _log2_ceil(n)
        tree = steps * (self.alpha + self.per_message)
        if self.scheme == "tree":
            return tree
        if self.scheme == "epoch":
            return tree if changed else 0.0
        raise ValueError(f"unknown agreement scheme {self.scheme!r} (want all-to-all, tree or epoch)")


@dataclass(frozen=True)
class Scheduler:
    """Nezha's per-operation choice: cold (best single rail) or hot (split), plus its costs."""

    rails: tuple
    agreement: Agreement
    split_cost: float = 0.0  # fixed per-operation cost of splitting over several rails
    algorithms: tuple = ALGORITHMS

    def cold(self, n, size):
        return min((best_algorithm(r, n, size, self.algorithms)[0], i) for i, r in enumerate(self.rails))

    def hot(self, n, size):
        shares, t = hot_split(self.rails, n, size, self.algorithms)
        return t + self.split_cost, shares

    def op_time(self, n, size):
        """(seconds, "cold"|"hot", shares) of one allreduce."""
        t_cold, best = self.cold(n, size)
        t_hot, shares = self.hot(n, size)
        agree = self.agreement.per_op(n)
        if len(self.rails) > 1 and t_hot < t_cold:
            return agree + t_hot, "hot", shares
        cold_shares = [0.0] * len(self.rails)
        cold_shares[best] = 1.0
        return agree + t_cold, "cold", cold_shares

    def single_rail_time(self, n, size):
        """The best single rail alone, no agreement: what a one-rail library does."""
        return self.cold(n, size)[0]

    def threshold(self, n, sizes):
        """Smallest size of the (ascending) grid from which hot start wins at every larger size."""
        hot = [self.op_time(n, s)[1] == "hot" for s in sizes]
        for i in range(len(sizes)):
            if all(hot[i:]):
                return sizes[i]
        return None

    def failover_stall(self, n, size, failed, detection):
        """Time one operation loses when rail `failed` dies under it: detection, one agreement
        round on the survivors (the set changed), then the failed rail's share replayed there."""
        survivors = tuple(r for i, r in enumerate(self.rails) if i != failed)
        if not survivors:
            raise ValueError("no rail survives")
        _, _, shares = self.op_time(n, size)
        lost = shares[failed] * size
        replay = 0.0
        if lost > 0:
            replay = Scheduler(survivors, self.agreement, self.split_cost, self.algorithms).hot(n, lost)[0] \
                if len(survivors) > 1 else best_algorithm(survivors[0], n, lost, self.algorithms)[0]
        return detection + self.agreement.per_op(n, changed=True) + replay
