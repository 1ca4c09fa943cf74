"""Discrete-event simulator of Nezha's multi-rail collectives (make bench-sim, run_des.py).

engine.py     event queue (time, then insertion order)
network.py    per-rail alpha-beta links, per-rank NIC queues (contention), rail failures
algorithms.py ring, recursive halving/doubling, binomial tree, recursive doubling as step programs;
              the all-to-all and dissemination agreement patterns
collective.py runs one algorithm's program on one rail for all ranks (or symmetry classes)
control.py    the control-mesh agreement round (dissemination: the runtime; all-to-all: the
              earlier runtime; tree, epoch what-ifs)
roundfree.py  round-free small operations: one round per 16 small cold operations
scheduler.py  the runtime's cold/hot rules, split, tuner and chunking (runtime/src/schedule/)
failover.py   a rail failing under an operation: detection, agreement, retire round, replay
liveness.py   heartbeats to the log2 N neighbours with a flooded verdict (the runtime; all-to-all: before
              the runtime's): traffic per rank, and a host losing every rail (when every peer knows)
waves.py      a restored rail re-entering between waves of the operation in flight
control_report.py  the report's control-plane section and its PASS/MISS lines
launch.py     a benchmark launch replayed operation by operation (probe, warmup, barrier, the tuner
              every 5 operations, TBF buckets carried over): what the validation compares with
launch_report.py   the report's lines on where the split starts on the bed and the replay's errors
"""
