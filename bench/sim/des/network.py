"""Per-rail alpha-beta links with per-rank NIC queues, and rail failures.

A message of b bytes from rank s to rank d on rail r (LogGP-like):
  - waits for s's transmit queue on r, then holds it for gap + b*beta (the sender's NIC and the
    syscall per message: contention between the messages a rank sends on one rail),
  - its first byte reaches d after alpha, then it waits for d's receive queue on r (taken in
    order of arrival) and holds it for b*beta (contention between messages arriving at one rank: an all-to-all round or a
    fold-in pays it), and is delivered when the receive ends.
Rails are independent (one NIC each), so a split really runs in parallel.

A rail shaped by a token bucket (the test bed's TBF: burst = 2 ms of the rate) sends at line
speed while the sender's bucket holds tokens and at the shaped rate beyond: small messages after
a pause pass at veth speed, which is what the test bed's small operations show.

Ranks are "classes" here: collective.py may fold N ranks onto P classes when every rank behaves
alike; the network only sees class indices.

A gray rail (slow) multiplies the wire time of every message starting after it turned gray.
A failed rail drops every message whose transmission starts at or after the failure (a black hole
or a cut link: nothing more arrives); what was in flight before still lands. A cut host
(fail_rank) is the same for every message from or to one rank, on every rail.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    name: str
    alpha: float  # seconds: first byte sent -> first byte at the peer (one message step)
    beta: float  # seconds per byte (the rail's bandwidth, with the reduction's CPU folded in)
    gap: float = 0.0  # seconds the sender is busy per message besides its bytes
    burst: int = 0  # token bucket of the rail's shaper (TBF), bytes; 0 = no bucket
    line_beta: float = 0.0  # seconds per byte while the bucket has tokens (the unshaped link)

    def __post_init__(self):
        if not (self.alpha >= 0 and self.beta > 0 and self.gap >= 0 and self.burst >= 0):
            raise ValueError(f"rail {self.name}: want alpha >= 0, beta > 0, gap >= 0, burst >= 0 "
                             f"(got {self.alpha}, {self.beta}, {self.gap}, {self.burst})")
        if self.burst and not 0 < self.line_beta <= self.beta:
            raise ValueError(f"rail {self.name}: a burst needs 0 < line_beta <= beta (got {self.line_beta})")

    def rx_beta(self):
        """Receiving is not shaped (TBF is an egress qdisc): line speed when there is a bucket."""
        return self.line_beta if self.burst else self.beta


class Network:
    def __init__(self, engine, links, classes, empty_buckets=()):
        if classes < 1:
            raise ValueError(f"classes must be >= 1, got {classes}")
        self.engine = engine
        self.links = list(links)
        self.classes = classes
        nr = len(self.links)
        self.tx_free = [[0.0] * classes for _ in range(nr)]
        self.rx_free = [[0.0] * classes for _ in range(nr)]
        self.failed_at = [None] * nr
        self.rank_failed_at = {}  # class -> time its host lost every rail
        self.slow_from = [(float("inf"), 1.0)] * nr
        self.sent_bytes = [0] * nr
        self.delivered_bytes = [0] * nr
        self.dropped_bytes = [0] * nr
        self.messages = [0] * nr
        self.last_delivery = [0.0] * nr  # when rail r last delivered anything (progress)
        # Buckets start full, or empty on the rails named in empty_buckets: the steady state of a
        # loop of operations that send more than the rate refills between them.
        self.tokens = [[0.0 if i in empty_buckets else float(l.burst)] * classes for i, l in enumerate(self.links)]
        self.tokens_at = [[0.0] * classes for _ in range(nr)]

    def slow(self, rail, t, factor):
        """Rail `rail` turns gray at time t: every message starting then or later takes `factor`
        times as long on the wire (a rail suddenly many times slower, still moving bytes)."""
        if factor < 1:
            raise ValueError(f"slow-down factor must be >= 1, got {factor}")
        self.slow_from[rail] = (t, factor)

    def _factor(self, rail, start):
        t, f = self.slow_from[rail]
        return f if start >= t else 1.0

    def fail(self, rail, t):
        """Rail `rail` carries nothing that starts at or after time t."""
        self.failed_at[rail] = t

    def fail_rank(self, rank, t):
        """Every rail of rank `rank`'s host is cut at time t: nothing from or to it starts later."""
        self.rank_failed_at[rank] = t

    def _rank_cut(self, src, dst, t):
        return any(r in self.rank_failed_at and t >= self.rank_failed_at[r] for r in (src, dst))

    def alive(self, rail, t=None):
        f = self.failed_at[rail]
        return f is None or (self.engine.now if t is None else t) < f

    def send(self, rail, src, dst, nbytes, on_sent, on_arrival):
        """Queue a message; on_sent() when it left the sender, on_arrival() when delivered (never,
        if the rail fails before it starts)."""
        link = self.links[rail]
        now = self.engine.now
        start = max(now, self.tx_free[rail][src])
        factor = self._factor(rail, start)
        tx_end = start + link.gap + self._tx_seconds(rail, src, start, nbytes) * factor
        self.tx_free[rail][src] = tx_end
        self.sent_bytes[rail] += nbytes
        self.messages[rail] += 1
        if not self.alive(rail, start) or (self.rank_failed_at and self._rank_cut(src, dst, start)):
            self.dropped_bytes[rail] += nbytes
            return  # the sender blocks forever too: its socket never drains
        self.engine.at(tx_end, on_sent)
        # The receive queue is taken in arrival order, decided when the first byte gets there.
        self.engine.at(start + link.gap + link.alpha, self._reach, rail, dst, nbytes, tx_end + link.alpha, on_arrival)

    def _tx_seconds(self, rail, src, start, nbytes):
        link = self.links[rail]
        if not link.burst:
            return nbytes * link.beta
        rate = 1.0 / link.beta
        tok = min(link.burst, self.tokens[rail][src] + (start - self.tokens_at[rail][src]) * rate)
        line = nbytes * link.line_beta
        if tok >= nbytes:
            secs = line
        else:
            secs = max(line, (nbytes - tok) * link.beta)
        # tokens keep refilling while the message goes out; what is left when it is gone:
        self.tokens[rail][src] = max(0.0, min(link.burst, tok + secs * rate) - nbytes)
        self.tokens_at[rail][src] = start + secs
        return secs

    def _reach(self, rail, dst, nbytes, last_byte, on_arrival):
        # the last byte cannot be received before it was sent (a shaped sender is slower)
        rx = nbytes * self.links[rail].rx_beta() * self._factor(rail, self.engine.now)
        rx_end = max(max(self.engine.now, self.rx_free[rail][dst]) + rx, last_byte)
        self.rx_free[rail][dst] = rx_end
        self.engine.at(rx_end, self._deliver, rail, nbytes, on_arrival)

    def _deliver(self, rail, nbytes, on_arrival):
        self.delivered_bytes[rail] += nbytes
        self.last_delivery[rail] = self.engine.now
        on_arrival()
