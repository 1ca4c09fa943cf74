"""The control mesh's agreement round (runtime/src/failover/control_mesh.cc maxReduce).

The runtime's round is "dissemination": step k sends the running max, framed
(kMeshHeaderBytes + 8 bytes per double), to (i + 2^k) mod N on the lowest live rail
(sendPrimary) and takes one from (i - 2^k) mod N; ceil(log2 N) messages per rank for any N. If
the primary rail is the one that just died, the first copy is lost and the step goes out again
on every rail after kResendAfter (3 ms).

"all-to-all" is the earlier runtime's round (and what the fit and validation, recorded
then, hold): every rank sends its vector to every peer and max-reduces the N-1 vectors it
receives: O(N) messages per rank, and when the vector itself grows with N (the retire round
after a failover holds one flag per rank and rail), O(N^2) bytes. What-ifs the runtime does not
run: "tree", the same max as recursive doubling (log2 N steps on a power of two, plus a fold-in
and fold-out otherwise), and "epoch", a rail-set epoch in the slice headers: no round while the
rail set holds, one tree round when it changes.
"""

from .collective import RailRun, classes_for

HEADER_BYTES = 4 + 2 + 2 + 8 + 4  # mesh_frame.h kMeshHeaderBytes
RESEND_AFTER = 0.003  # control_mesh.cc kResendAfter
SCHEMES = ("all-to-all", "tree", "dissemination", "epoch")
_ALGO = {"all-to-all": "a2a", "tree": "rd", "epoch": "rd", "dissemination": "dis"}


def algo_for(scheme):
    """The step program (algorithms.py) a scheme's round runs."""
    if scheme not in _ALGO:
        raise ValueError(f"unknown agreement scheme {scheme!r} (want one of {', '.join(SCHEMES)})")
    return _ALGO[scheme]


def changed_round(scheme):
    """The scheme of a round held because something changed (a failover's agreement and retire
    rounds): epoch changes its epoch with one tree round; the others run their own round."""
    return "tree" if scheme == "epoch" else scheme


def frame_bytes(doubles):
    return HEADER_BYTES + 8 * doubles


def start_round(engine, net, rail, n, doubles, scheme="all-to-all", changed=True, tag="agree", classes=None):
    """Starts one round at engine.now on `rail`; returns its RailRun (None when nothing is sent).
    classes: rank classes to simulate (default: the network's, when the pattern folds)."""
    algo = algo_for(scheme)
    if n <= 1 or (scheme == "epoch" and not changed):
        return None
    parts = [(algo, frame_bytes(doubles))]
    if classes is None:
        classes = net.classes if classes_for(n, parts, net.classes) == net.classes else n
    return RailRun(engine, net, rail, n, parts, classes, tag=tag).start()


def round_traffic(links, rail, n, doubles, scheme="all-to-all", changed=True, fold=None):
    """One round alone on an idle network: (seconds, messages one rank sends, bytes one rank
    sends), counted from the simulated network (every rank sends alike in these patterns)."""
    from .engine import Engine
    from .network import Network

    eng = Engine()
    algo = algo_for(scheme)
    net = Network(eng, links, classes_for(n, [(algo, 0)]) if fold is None else classes_for(n, [(algo, 0)], fold))
    run = start_round(eng, net, rail, n, doubles, scheme, changed, classes=net.classes)
    if run is None:
        return 0.0, 0.0, 0.0
    eng.run()
    return run.end_time(), net.messages[rail] / net.classes, net.sent_bytes[rail] / net.classes


def round_seconds(links, rail, n, doubles, scheme="all-to-all", changed=True, fold=None):
    """One round alone on an idle network."""
    return round_traffic(links, rail, n, doubles, scheme, changed, fold)[0]
