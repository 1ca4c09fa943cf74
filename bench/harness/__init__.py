"""Nezha benchmark harness: runs nezha-bench, gloo-bench and MPTCP on the rail test bed and
compares them. Pure parts (sizes, ceiling, ratios, goals, merging, tables) have no I/O and are
unit-tested in bench/tests; the rest drives hack/testbed.sh and needs root."""
