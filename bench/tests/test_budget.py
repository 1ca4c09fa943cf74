import pytest

from bench.harness.budget import LAUNCH_SECONDS, PER_OP_SECONDS, band_seconds, band_seconds_all_repeats, launch_timeout
from bench.harness.config import FULL_BANDS, QUICK_BANDS, SCENARIOS, Scenario
from bench.harness.ceiling import single_rail_algbw_gbps
from bench.harness.sizes import Band


def test_band_seconds_counts_every_op():
    b = Band(1 << 20, 2 << 20, warmup=1, iters=3)
    # 3 MiB per op-round, 4 ops, at 1e8 B/s.
    want = LAUNCH_SECONDS + (3 << 20) * 4 / 1e8 + PER_OP_SECONDS * 4 * 2
    assert band_seconds(b, 0.1) == pytest.approx(want)
    assert band_seconds(b, 0.1, warmup=5) > band_seconds(b, 0.1)


def test_band_seconds_rejects_zero_rate():
    with pytest.raises(ValueError):
        band_seconds(Band(1024, 1024, 1, 1), 0)


def test_timeout_is_generous():
    assert launch_timeout(10) >= 4 * 10


def test_full_run_fits_twenty_minutes_at_single_rail_speed():
    # Worst case: all five measured series at the slowest scenario's best single rail speed.
    total = 0.0
    for scen in SCENARIOS:
        slow = single_rail_algbw_gbps(scen.rates_mbit[scen.best_rail()], 4)
        total += 5 * sum(band_seconds_all_repeats(b, slow) for b in FULL_BANDS)
    assert total < 20 * 60, total


def test_bands_are_contiguous_powers_of_two():
    for bands in (FULL_BANDS, QUICK_BANDS):
        for a, b in zip(bands, bands[1:]):
            assert b.min_bytes == a.max_bytes * 2


def test_best_rail():
    assert Scenario("x", (800, 300)).best_rail() == 0
    assert Scenario("x", (300, 800)).best_rail() == 1
    assert Scenario("x", (500, 500)).best_rail() == 0
