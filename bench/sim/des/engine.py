"""The event queue: callbacks run in time order, ties in the order they were scheduled.

Determinism matters more than speed here: two events at the same instant always run in the
order they were posted, so every run of the simulator gives the same numbers.
"""

import heapq
import itertools


class Engine:
    def __init__(self):
        self.now = 0.0
        self._queue = []
        self._seq = itertools.count()
        self.events_run = 0

    def at(self, t, fn, *args):
        """Run fn(*args) at time t (never in the past)."""
        if t < self.now:
            raise ValueError(f"event at {t} is before now ({self.now})")
        heapq.heappush(self._queue, (t, next(self._seq), fn, args))

    def after(self, delay, fn, *args):
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        self.at(self.now + delay, fn, *args)

    def run(self, until=None):
        """Run events until the queue is empty (or the next one is after `until`); returns now."""
        while self._queue:
            t, _, fn, args = self._queue[0]
            if until is not None and t > until:
                self.now = until
                break
            heapq.heappop(self._queue)
            self.now = t
            self.events_run += 1
            fn(*args)
        return self.now

    def pending(self):
        return len(self._queue)
