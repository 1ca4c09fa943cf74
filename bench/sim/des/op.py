"""One allreduce end to end on the simulated rails, as Communicator::Impl::runSlices runs it:
plan, chunk, every rail's chunks in order on its own thread, then the per-operation agreement
round (7 doubles per rail, failover on) on the control mesh."""

from dataclasses import dataclass, field

from . import control
from .collective import RailRun, classes_for
from .engine import Engine
from .network import Network
from .scheduler import chunked

ROUND_FIELDS = 7  # failover.cc agreeOnAttempt: kFields doubles per rail
LOOP_OPS = 30  # operations of one size in a benchmark loop (warmup + iterations, measure.py)


@dataclass
class OpResult:
    seconds: float
    hot: bool
    slices: list  # [(rail, offset, units)]
    rail_seconds: list  # per rail, 0 if unused
    rail_bytes: list
    agreement_seconds: float
    net: object = field(repr=False, default=None)


def rail_parts(policy, chunks):
    """Per rail, the (algorithm, bytes) parts of its chunks, in order, and the chunks themselves."""
    per = {}
    for rail, off, count in chunks:
        per.setdefault(rail, []).append((rail, off, count))
    return {r: ([(policy.algorithm(r, c * policy.elem), c * policy.elem) for _, _, c in cs], cs) for r, cs in per.items()}


def primary_rail(policy):
    return min(policy.live())


def run_op(policy, nbytes, ratios=None, scheme="all-to-all", force=None, changed=False, hold_round=True):
    """One operation as it runs inside a loop of the same operation (what a benchmark times);
    hold_round=False: without its per-op round (a round-free operation, roundfree.py).
    A shaped rail whose sender puts out more bytes per operation than its rate refills, by more
    than the bucket holds over the loop (LOOP_OPS operations), runs with an empty bucket in that
    loop, so the operation is simulated again with it empty."""
    res = _run_op(policy, nbytes, ratios, scheme, force, changed, (), hold_round)
    drained = tuple(r for r, link in enumerate(policy.links)
                    if link.burst and LOOP_OPS * (res.net.sent_bytes[r] / res.net.classes - res.seconds / link.beta)
                    > link.burst)
    return _run_op(policy, nbytes, ratios, scheme, force, changed, drained, hold_round) if drained else res


def _run_op(policy, nbytes, ratios, scheme, force, changed, empty_buckets, hold_round=True):
    slices = policy.plan(nbytes, ratios, force)
    hot = len(slices) > 1
    chunks = chunked(slices, policy.elem)
    per = rail_parts(policy, chunks)
    eng = Engine()
    parts_all = [p for parts, _ in per.values() for p in parts] + [(control.algo_for(scheme), 0)]
    net = Network(eng, policy.links, classes_for(policy.n, parts_all, policy.fold), empty_buckets)
    runs = {r: RailRun(eng, net, r, policy.n, parts, net.classes, tag=("data", r)).start(0.0) for r, (parts, _) in per.items()}
    eng.run()
    nr = len(policy.links)
    rail_seconds, rail_bytes = [0.0] * nr, [0] * nr
    for r, run in runs.items():
        rail_seconds[r] = run.end_time()
        rail_bytes[r] = sum(c for _, _, c in per[r][1]) * policy.elem
    data_end = max(rail_seconds) if runs else 0.0
    if hot:
        data_end += policy.split_cost
    eng.now = max(eng.now, data_end)
    rnd = control.start_round(eng, net, primary_rail(policy), policy.n, ROUND_FIELDS * nr, scheme, changed) \
        if hold_round else None
    eng.run()
    end = rnd.end_time() if rnd else data_end
    return OpResult(end, hot, slices, rail_seconds, rail_bytes, end - data_end, net)


def learn_ratios(policy, nbytes, updates=8, scheme="all-to-all"):
    """The tuner's fixed point for this size: tuneRatios applied to simulated timings. In a
    deterministic simulation tuneInterval identical operations give the same stats as one, so
    each update costs one simulated operation. Returns (ratios, per-update ratio history)."""
    ratios = list(policy.base)
    history = [list(ratios)]
    for _ in range(updates):
        res = run_op(policy, nbytes, ratios, scheme, force="hot")
        if not res.hot:
            break
        nxt = tune_ratios_from(policy, ratios, res)
        moved = max(abs(a - b) for a, b in zip(nxt, ratios))
        ratios = nxt
        history.append(list(ratios))
        if moved < 1e-3:  # at the fixed point: further updates change nothing measurable
            break
    return ratios, history


def tune_ratios_from(policy, ratios, res):
    from .scheduler import tune_ratios

    return tune_ratios(ratios, res.rail_bytes, res.rail_seconds, policy.gain)
