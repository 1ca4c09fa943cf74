"""Tests of the benchmark harness and the simulators (make test-python)."""
