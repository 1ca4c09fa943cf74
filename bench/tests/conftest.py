"""Fixtures shared by the harness tests. The tests import the harness as the `bench` package
(bench/__init__.py); pytest puts the repository root on the path through its rootdir conftest.py."""
import pytest


class StopLaunch(RuntimeError):
    """Raised by the stand-in run_ranks so a test sees what run_launch would start."""


@pytest.fixture
def stopped_launch(tmp_path, monkeypatch):
    """run_launch up to the moment it starts the ranks, on a bed that answers addresses and
    counters only. Returns call(scenario, spec, band, repeat=0, split=()) -> what run_ranks got:
    {"tag": ..., "argv": rank -> argv}."""
    from bench.harness import runner
    from bench.harness.config import load_tunables

    seen = {}

    def fake_run_ranks(bed, world, argv, env, timeout, work_dir, tag):
        seen.update(tag=tag, argv=argv)
        raise StopLaunch()

    class Bed:
        def addr(self, host, rail):
            return "10.100.0.10"

        def rail_tx_bytes(self):
            return []

        def mptcp_counters(self):
            return {}

    monkeypatch.setattr(runner, "run_ranks", fake_run_ranks)
    ctx = runner.RunContext(tun=load_tunables(), bed=Bed(), bands=[], work_dir=str(tmp_path), check=True, iperf=False)

    def call(scenario, spec, band, repeat=0, split=()):
        with pytest.raises(StopLaunch):
            runner.run_launch(ctx, scenario, spec, band, repeat, split)
        return dict(seen)

    return call
