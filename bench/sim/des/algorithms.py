"""Allreduce algorithms as per-rank step programs (standard definitions).

A program is a list of steps (tag, sends, nrecv): the rank posts every send of a step at once,
and the step ends when its sends left the rank and `nrecv` messages tagged `tag` arrived. The
next step starts then. A message's tag is the step it belongs to on both sides, so a fast
sender's message waits in the receiver's mailbox until the receiver gets there.

  ring  reduce-scatter then allgather, 2(n-1) steps of about S/n (runtime: allreduceRing)
  rd    recursive doubling on the whole vector, log2(p) steps of S; the n-p extra ranks fold in
        and out (runtime: allreduceRecursiveDoubling, used below NEZHA_RING_THRESHOLD)
  rhd   Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather on p
        ranks, the same fold-in
  tree  binomial reduce to rank 0, then binomial broadcast of the whole vector
  dis   dissemination (an agreement what-if, not an allreduce the runtime runs): step k sends the
        running max to (i + 2^k) mod n and takes one from (i - 2^k) mod n, ceil(log2 n) steps of
        the whole vector; exact for any n because max is idempotent (a value counted twice is
        still the max)

The reduction's CPU cost is not a separate term: it is in the rails' beta (the fit to the test
bed measures both together).
"""

ALGORITHMS = ("ring", "rd", "rhd", "tree")


def _pow2_floor(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _parts(nbytes, k):
    """nbytes cut into k integer parts, as the runtime cuts a buffer (begin(c) = S*c/k)."""
    return [nbytes * (c + 1) // k - nbytes * c // k for c in range(k)]


def ring(rank, n, nbytes):
    if n == 1:
        return []
    part = _parts(nbytes, n)
    nxt = (rank + 1) % n
    steps = []
    for s in range(n - 1):  # reduce-scatter: send chunk r-s, receive chunk r-s-1
        steps.append((("rs", s), [(nxt, part[(rank - s) % n])], 1))
    for s in range(n - 1):  # allgather: send chunk r+1-s
        steps.append((("ag", s), [(nxt, part[(rank + 1 - s) % n])], 1))
    return steps


def _fold(rank, n, nbytes, inner):
    """The runtime's fold for n not a power of two: of the first 2*(n-p) ranks, each even one
    hands its vector to the odd one above it, sits out, and gets the result back."""
    p = _pow2_floor(n)
    rem = n - p
    if rank < 2 * rem and rank % 2 == 0:
        return [(("fold", 0), [(rank + 1, nbytes)], 0), (("unfold", 0), [], 1)]
    vrank = rank // 2 if rank < 2 * rem else rank - rem

    def real(v):
        return 2 * v + 1 if v < rem else v + rem

    steps = []
    if rank < 2 * rem:
        steps.append((("fold", 0), [], 1))
    steps += [(tag, [(real(v), b) for v, b in sends], nr) for tag, sends, nr in inner(vrank, p, nbytes)]
    if rank < 2 * rem:
        steps.append((("unfold", 0), [(rank - 1, nbytes)], 0))
    return steps


def _rd_pow2(v, p, nbytes):
    steps = []
    k = 1
    while k < p:
        steps.append((("rd", k), [(v ^ k, nbytes)], 1))
        k *= 2
    return steps


def _rhd_pow2(v, p, nbytes):
    steps = []
    # reduce-scatter by recursive halving: the exchanged half shrinks each step
    size, k = nbytes, p // 2
    while k >= 1:
        half = size // 2 if (v & k) else size - size // 2
        steps.append((("rh", k), [(v ^ k, size - half)], 1))
        size = half
        k //= 2
    # allgather by recursive doubling: the exchanged block grows back
    k = 1
    while k < p:
        steps.append((("ag", k), [(v ^ k, size)], 1))
        size *= 2
        k *= 2
    return steps


def rd(rank, n, nbytes):
    return [] if n == 1 else _fold(rank, n, nbytes, _rd_pow2)


def rhd(rank, n, nbytes):
    return [] if n == 1 else _fold(rank, n, nbytes, _rhd_pow2)


def tree(rank, n, nbytes):
    if n == 1:
        return []
    steps = []
    levels = []
    k = 1
    while k < n:
        levels.append(k)
        k *= 2
    for k in levels:  # binomial reduce to 0
        if rank % (2 * k) == k:
            steps.append((("red", k), [(rank - k, nbytes)], 0))
            break
        if rank % (2 * k) == 0 and rank + k < n:
            steps.append((("red", k), [], 1))
    for k in reversed(levels):  # binomial broadcast from 0
        if rank % (2 * k) == k:
            steps.append((("bc", k), [], 1))
        elif rank % (2 * k) == 0 and rank + k < n:
            steps.append((("bc", k), [(rank + k, nbytes)], 0))
    return steps


def alltoall(rank, n, nbytes):
    """Not an allreduce: the control mesh's agreement round (every rank sends its vector to every
    peer and reduces what arrives), one step of n-1 sends and n-1 receives."""
    if n == 1:
        return []
    return [(("a2a", 0), [((rank + d) % n, nbytes) for d in range(1, n)], n - 1)]


def dissemination(rank, n, nbytes):
    """Dissemination max (Hensgen, Finkel and Manber's barrier pattern carrying a vector): after
    step k every rank holds the max over the 2^(k+1) ranks ending at itself, so after
    ceil(log2 n) steps it holds the max over all n (overlaps only repeat values max ignores)."""
    steps, k = [], 1
    while k < n:
        steps.append((("dis", k), [((rank + k) % n, nbytes)], 1))
        k *= 2
    return steps


def dissemination_max(values):
    """The values every rank holds after the dissemination steps (the pattern of `dissemination`
    applied to numbers: a check that it computes the max for any n, not just powers of two)."""
    n, cur, k = len(values), list(values), 1
    while k < n:
        cur = [max(cur[i], cur[(i - k) % n]) for i in range(n)]
        k *= 2
    return cur


PROGRAMS = {"ring": ring, "rd": rd, "rhd": rhd, "tree": tree, "a2a": alltoall, "dis": dissemination}


def program(algo, rank, n, nbytes):
    if algo not in PROGRAMS:
        raise ValueError(f"unknown algorithm {algo!r} (want one of {', '.join(ALGORITHMS)})")
    if n < 1 or not 0 <= rank < n:
        raise ValueError(f"rank {rank} of {n} ranks")
    if nbytes < 0:
        raise ValueError(f"negative size {nbytes}")
    return PROGRAMS[algo](rank, n, nbytes)


def symmetric(algo, n):
    """Whether every rank runs the same program up to relabelling (so ranks fold onto classes)."""
    return algo in ("ring", "a2a", "dis") or (algo in ("rd", "rhd") and n & (n - 1) == 0)


def runtime_choice(n, nbytes, elem=4, ring_threshold=64 << 10):
    """runtime/src/collectives/allreduce.cc chooseAllreduce: recursive doubling below the ring
    threshold or with fewer elements than ranks, the ring above."""
    return "rd" if nbytes // elem < n or nbytes < ring_threshold else "ring"
