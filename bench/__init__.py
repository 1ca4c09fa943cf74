"""Nezha's benchmark suite as one package: the drivers (`python3 -m bench.run_bench`, ...) run a
suite on the rail test bed and write its result through bench.harness.results; bench.harness holds
what they share and bench.sim the simulators fitted to the committed results (bench/README.md)."""
