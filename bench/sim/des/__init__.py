"""Discrete-event simulator of Nezha's multi-rail collectives (make bench-sim, run_des.py).

engine.py     event queue (time, then insertion order)
network.py    per-rail alpha-beta links, per-rank NIC queues (contention), rail failures
algorithms.py ring, recursive halving/doubling, binomial tree, recursive doubling as step programs
collective.py runs one algorithm's program on one rail for all ranks (or symmetry classes)
control.py    the control-mesh agreement round (all-to-all today; tree and epoch variants)
scheduler.py  the runtime's cold/hot rules, split, tuner and chunking (runtime/src/schedule/)
failover.py   a rail failing under an operation: detection, agreement, retire round, replay
"""
