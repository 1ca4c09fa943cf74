"""Runs step programs on one rail for every rank, and reports when each rank finished each part.

A rail's work in one attempt is a sequence of parts (the chunks of its slice, each one
collective), run in order on the rail's own thread as the runtime does: a rank starts part i+1
as soon as it finished part i.

Folding: when the algorithm is symmetric (ring; rd/rhd on a power of two) and every rank is
alike, ranks r and r mod P behave identically, so only P classes are simulated: a message to
logical rank q goes to class q mod P. Exact for homogeneous ranks; it turns the ring's
2(N-1) x N messages at 1,024 ranks into 2(N-1) x P.
"""

from . import algorithms

DEFAULT_FOLD = 8


def classes_for(n, parts, fold=DEFAULT_FOLD):
    """How many rank classes to simulate for these parts on n ranks (fold 0: never fold)."""
    if fold and n > fold and n % fold == 0 and all(algorithms.symmetric(a, n) for a, _ in parts):
        return fold
    return n


class RailRun:
    """One rail, one sequence of (algorithm, bytes) parts, all ranks (or classes)."""

    def __init__(self, engine, net, rail, n, parts, classes=None, tag=0):
        self.engine, self.net, self.rail, self.n = engine, net, rail, n
        self.parts = list(parts)
        self.classes = classes or classes_for(n, self.parts)
        if self.classes > net.classes:
            raise ValueError(f"{self.classes} classes on a network of {net.classes}")
        self.tag = tag  # distinguishes attempts sharing a rail
        self.done = [[None] * len(self.parts) for _ in range(self.classes)]  # per class, per part
        self.started = None
        self._mail = [dict() for _ in range(self.classes)]
        self._state = []

    def start(self, at=None):
        self.started = self.engine.now if at is None else at
        for c in range(self.classes):
            prog = []
            for i, (algo, nbytes) in enumerate(self.parts):
                steps = algorithms.program(algo, c, self.n, nbytes)
                prog += [((self.tag, i, t), s, nr, False) for t, s, nr in steps]
                prog.append(((self.tag, i, "end"), [], 0, True))
            self._state.append({"prog": prog, "idx": -1, "sends_left": 0, "waiting": False})
            self.engine.at(self.started, self._next, c)
        return self

    def _next(self, c):
        st = self._state[c]
        st["idx"] += 1
        if st["idx"] >= len(st["prog"]):
            return
        tag, sends, nrecv, is_end = st["prog"][st["idx"]]
        if is_end:
            self.done[c][tag[1]] = self.engine.now
            self._next(c)
            return
        st["sends_left"] = len(sends)
        st["need"] = nrecv
        for peer, nbytes in sends:
            self.net.send(self.rail, c, peer % self.classes, nbytes, lambda c=c: self._sent(c),
                          lambda d=peer % self.classes, t=tag: self._arrive(d, t))
        self._check(c)

    def _sent(self, c):
        self._state[c]["sends_left"] -= 1
        self._check(c)

    def _arrive(self, c, tag):
        box = self._mail[c]
        box[tag] = box.get(tag, 0) + 1
        st = self._state[c]
        if 0 <= st["idx"] < len(st["prog"]) and st["prog"][st["idx"]][0] == tag:
            self._check(c)

    def _check(self, c):
        st = self._state[c]
        tag = st["prog"][st["idx"]][0]
        if st["sends_left"] == 0 and self._mail[c].get(tag, 0) >= st["need"]:
            self._mail[c].pop(tag, None)
            st["sends_left"] = -1  # this step is over; late callbacks must not end it twice
            self._next(c)

    # Results -------------------------------------------------------------------------------
    def finished(self):
        return all(d[-1] is not None for d in self.done) if self.parts else True

    def end_time(self):
        """When the last rank finished the last part (None if some rank never did)."""
        if not self.parts:
            return self.started
        ends = [d[-1] for d in self.done]
        return None if any(e is None for e in ends) else max(ends)

    def leading_done(self, at=None):
        """Parts every rank finished (by time `at`, if given), counted from the first (the
        runtime's -max(-done) round)."""
        counts = []
        for d in self.done:
            k = 0
            while k < len(d) and d[k] is not None and (at is None or d[k] <= at):
                k += 1
            counts.append(k)
        return min(counts) if counts else 0


def run_alone(links, rail, n, parts, fold=DEFAULT_FOLD):
    """Seconds of these parts on one rail of an idle network (a helper for probes and sweeps)."""
    from .engine import Engine
    from .network import Network

    eng = Engine()
    classes = classes_for(n, parts, fold)
    net = Network(eng, links, classes)
    run = RailRun(eng, net, rail, n, parts, classes).start(0.0)
    eng.run()
    t = run.end_time()
    if t is None:
        raise RuntimeError("a rank never finished on a healthy rail (program mismatch)")
    return t
