"""A rail failing under a hot operation, as failover.cc handles it (failover on, the default):

  1. the attempt: every rail runs its chunks; the failed rail carries nothing from t_fail on
  2. detection: a gray rail (40x slower) by the watchdog's "slow" verdict, max(400 ms, 3 x the
     slice's prediction) after the other rails finished; a link event (netlink on the rank that lost carrier, then a RAIL_DOWN notice to
     every peer on the control mesh: peers abort the rail at once), or for a black hole the
     progress watchdog (nothing arrived on the rail for NEZHA_WATCHDOG_MS = 400 ms while another
     rail moved or finished); the no-progress deadline max(1 s, 4 x predicted) is the backstop
  3. agreeOnAttempt: one all-to-all round of 7 doubles per rail (failed flags, -chunks done...);
     if the dead rail is the mesh's primary (lowest) rail the first copies are lost and the
     round goes out on every rail after kResendAfter (3 ms)
  4. retireRails: one more all-to-all round whose vector holds a flag per rank and leaving rail
     (N*k + k doubles): O(N) messages of O(N) bytes per rank
  5. replay: the failed rail's chunks not done on every rank (the leading chunks every rank
     finished stand) are re-split over the survivors by their ratios, chunked, and run
  6. the replay attempt's own agreement round
The result holds each phase's time, so the cost of the agreement at 1,024 ranks is visible.
"""

from dataclasses import dataclass

from . import control
from .collective import RailRun, classes_for
from .engine import Engine
from .network import Network
from .op import ROUND_FIELDS, rail_parts
from .scheduler import chunked, split_count, to_weights

WATCHDOG = 0.4  # NEZHA_WATCHDOG_MS (the runtime's default)
PROGRESS_FLOOR = 1.0  # NEZHA_PROGRESS_FLOOR_MS
LINK_EVENT = 0.001  # netlink carrier loss to the rank's handler (assumed: one netlink message)
SLOW_FACTOR = 3.0  # NEZHA_SLOW_FACTOR (the runtime's default)
GRAY = 40.0  # a gray rail: this many times slower (the brief's failure model)
KINDS = ("link event", "black hole", "gray")


@dataclass
class FailoverResult:
    healthy_seconds: float  # the same operation without the failure
    seconds: float  # with it
    fail_at: float
    detected_at: float  # nan: never judged failed (a gray rail that finished under its deadlines)
    attempt_end: float
    agree_round: float
    retire_round: float
    replay: float
    replay_round: float
    lost_units: int  # units of the failed rail's chunks not done on every rank
    replayed_units: int
    done_chunks: list  # chunks that stand after the first attempt
    redo_chunks: list  # chunks replayed (before re-splitting)
    replay_chunks: list  # what ran on the survivors
    control_bytes: float  # bytes one rank sends in the agreement and retire rounds


def _round(eng, net, rail, n, doubles, scheme, changed=True):
    start = eng.now
    rnd = control.start_round(eng, net, rail, n, doubles, scheme, changed)
    eng.run()
    return (rnd.end_time() if rnd else start) - start


def run_failover(policy, nbytes, ratios, fail_rail, fail_frac=0.5, kind="black hole", scheme="all-to-all",
                 healthy_seconds=None):
    """Fails `fail_rail` at fail_frac of its healthy slice time; returns a FailoverResult."""
    if kind not in KINDS:
        raise ValueError(f"kind: want one of {', '.join(KINDS)}, got {kind!r}")
    n, nr = policy.n, len(policy.links)
    slices = policy.plan(nbytes, ratios, force="hot")
    chunks = chunked(slices, policy.elem)
    per = rail_parts(policy, chunks)
    if fail_rail not in per:
        raise ValueError(f"rail {fail_rail} carries nothing of this operation")
    eng = Engine()
    parts_all = [p for parts, _ in per.values() for p in parts] + [(control.algo_for(scheme), 0)]
    net = Network(eng, policy.links, classes_for(n, parts_all, policy.fold))
    runs = {r: RailRun(eng, net, r, n, parts, net.classes, tag=("data", r)).start(0.0) for r, (parts, _) in per.items()}
    # When would the failed rail have finished? (a twin run without the failure)
    twin = run_alone_time(policy, fail_rail, per[fail_rail][0])
    fail_at = fail_frac * twin
    if kind == "gray":
        net.slow(fail_rail, fail_at, GRAY)
    else:
        net.fail(fail_rail, fail_at)
    eng.run()
    survivors_end = max((run.end_time() or 0.0) for r, run in runs.items() if r != fail_rail) if len(runs) > 1 else 0.0
    verdict_at = None
    if kind == "gray":
        # watchdog "slow": every other rail finished, and this slice still runs max(window,
        # slow factor x its prediction) later while bytes still arrive
        verdict_at = slow_verdict(policy, runs[fail_rail], per[fail_rail][1], fail_rail, survivors_end)
        gray_end = runs[fail_rail].end_time()
        if verdict_at is None:  # it finished slowly before any verdict: no failover
            eng.now = gray_end
            final = _round(eng, net, min(policy.live()), n, ROUND_FIELDS * nr, control.changed_round(scheme))
            return FailoverResult(healthy_seconds or 0.0, eng.now, fail_at, float("nan"), gray_end, final, 0.0, 0.0, 0.0, 0,
                                  0, [c for _, cs in per.values() for c in cs], [], [], 0.0)
        detected = verdict_at
    elif kind == "link event":
        detected = fail_at + LINK_EVENT + policy.links[min(r for r in range(nr) if r != fail_rail)].alpha
    else:
        last = max(net.last_delivery[fail_rail], 0.0)
        detected = last + min(WATCHDOG, max(PROGRESS_FLOOR, 4 * twin))
    attempt_end = max(survivors_end, detected)
    eng.now = attempt_end
    ctl0 = sum(net.sent_bytes)
    alive = [i for i in range(nr) if i != fail_rail and policy.alive[i]]
    mesh_rail = min(alive)
    agree = _round(eng, net, mesh_rail, n, ROUND_FIELDS * nr, control.changed_round(scheme))
    if fail_rail < mesh_rail:  # the primary copy went out on the dead rail
        eng.now += control.RESEND_AFTER
        agree += control.RESEND_AFTER
    retire = _round(eng, net, mesh_rail, n, n * 1 + 1, control.changed_round(scheme))
    ctl = (sum(net.sent_bytes) - ctl0) / net.classes
    # Chunks that stand: every unflagged rail's, and the failed rail's leading chunks done everywhere.
    lead = runs[fail_rail].leading_done(at=verdict_at)
    fchunks = per[fail_rail][1]
    done = [c for r, (_, cs) in per.items() if r != fail_rail for c in cs] + fchunks[:lead]
    redo = fchunks[lead:]
    w = to_weights([policy.base[i] if i in alive else 0.0 for i in range(nr)] if ratios is None else
                   [ratios[i] if i in alive else 0.0 for i in range(nr)])
    min_units = -(-policy.min_slice // policy.elem)
    resplit = []
    for _, off, count in redo:
        resplit += [(r, off + o, c) for r, o, c in split_count(count, w, min_units)]
    replay_chunks = chunked(resplit, policy.elem)
    t0 = eng.now
    rper = rail_parts(policy, replay_chunks)
    rruns = [RailRun(eng, net, r, n, parts, net.classes, tag=("replay", r)).start(t0) for r, (parts, _) in rper.items()]
    eng.run()
    replay = (max(run.end_time() for run in rruns) - t0) if rruns else 0.0
    eng.now = t0 + replay
    final = _round(eng, net, mesh_rail, n, ROUND_FIELDS * nr, control.changed_round(scheme))
    return FailoverResult(
        healthy_seconds=healthy_seconds if healthy_seconds is not None else 0.0, seconds=eng.now, fail_at=fail_at,
        detected_at=detected, attempt_end=attempt_end, agree_round=agree, retire_round=retire, replay=replay,
        replay_round=final, lost_units=sum(c for _, _, c in redo), replayed_units=sum(c for _, _, c in replay_chunks),
        done_chunks=done, redo_chunks=redo, replay_chunks=replay_chunks, control_bytes=ctl)


def slow_verdict(policy, run, chunks, rail, others_done):
    """When the watchdog calls the gray rail slow (None if it finishes first): each chunk is one
    task with its own prediction; the clock starts when the other rails are done or the chunk
    started, whichever is later, and runs max(window, slow factor x prediction)."""
    t = others_done
    for k, (_, _, count) in enumerate(chunks):
        ends = [d[k] for d in run.done]
        if all(e is not None and e <= t for e in ends):
            continue  # done before the clock started
        start = max(d[k - 1] for d in run.done) if k else 0.0
        predicted = policy.lat[rail] + count * policy.elem / policy.bw[rail]
        deadline = max(t, start) + max(WATCHDOG, SLOW_FACTOR * predicted)
        if any(e is None or e > deadline for e in ends):
            return deadline
        t = max(ends)
    return None


def run_alone_time(policy, rail, parts):
    """Seconds of `parts` alone on `rail` (the failed rail's healthy twin)."""
    eng = Engine()
    net = Network(eng, policy.links, classes_for(policy.n, parts, policy.fold))
    run = RailRun(eng, net, rail, policy.n, parts, net.classes).start(0.0)
    eng.run()
    return run.end_time()
