"""The control mesh's agreement round (runtime/src/failover/control_mesh.cc maxReduce).

Today: every rank sends its vector, framed (kMeshHeaderBytes + 8 bytes per double), to every
peer on the lowest live rail (sendPrimary) and max-reduces the N-1 vectors it receives. Per rank
that is N-1 sends and N-1 receives per round: O(N) messages, and when the vector itself grows
with N (the retire round after a failover holds one flag per rank and rail), O(N^2) bytes.
If the primary rail is the one that just died, the first copies are lost and the round goes
out again on every rail after kResendAfter (3 ms).

Variants the simulator can price (issue 18): "tree", the same max as recursive doubling
(log2 N steps), and "epoch", a rail-set epoch in the slice headers: no round while the rail set
holds, one tree round when it changes.
"""

from .collective import RailRun, classes_for

HEADER_BYTES = 4 + 2 + 2 + 8 + 4  # mesh_frame.h kMeshHeaderBytes
RESEND_AFTER = 0.003  # control_mesh.cc kResendAfter
SCHEMES = ("all-to-all", "tree", "epoch")


def frame_bytes(doubles):
    return HEADER_BYTES + 8 * doubles


def start_round(engine, net, rail, n, doubles, scheme="all-to-all", changed=True, tag="agree", classes=None):
    """Starts one round at engine.now on `rail`; returns its RailRun (None when nothing is sent).
    classes: rank classes to simulate (default: the network's, when the pattern folds)."""
    if n <= 1 or (scheme == "epoch" and not changed):
        return None
    if scheme == "all-to-all":
        algo = "a2a"
    elif scheme in ("tree", "epoch"):
        algo = "rd"
    else:
        raise ValueError(f"unknown agreement scheme {scheme!r} (want one of {', '.join(SCHEMES)})")
    parts = [(algo, frame_bytes(doubles))]
    if classes is None:
        classes = net.classes if classes_for(n, parts, net.classes) == net.classes else n
    return RailRun(engine, net, rail, n, parts, classes, tag=tag).start()


def round_seconds(links, rail, n, doubles, scheme="all-to-all", changed=True, fold=None):
    """One round alone on an idle network."""
    from .engine import Engine
    from .network import Network

    eng = Engine()
    algo = "a2a" if scheme == "all-to-all" else "rd"
    net = Network(eng, links, classes_for(n, [(algo, 0)]) if fold is None else classes_for(n, [(algo, 0)], fold))
    run = start_round(eng, net, rail, n, doubles, scheme, changed, classes=net.classes)
    if run is None:
        return 0.0
    eng.run()
    return run.end_time()
