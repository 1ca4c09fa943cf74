import pytest

from bench.harness.ceiling import ceiling_algbw_gbps, ring_allreduce_bus_factor, single_rail_algbw_gbps


def test_bus_factor():
    assert ring_allreduce_bus_factor(4) == pytest.approx(1.5)
    assert ring_allreduce_bus_factor(2) == pytest.approx(1.0)
    assert ring_allreduce_bus_factor(1) == 1.0


def test_ceiling_heterogeneous_four_ranks():
    # 800 + 300 Mbit/s = 137.5 MB/s of egress; ring allreduce moves 1.5x the message per rank.
    assert ceiling_algbw_gbps([800, 300], 4) == pytest.approx(137.5e6 / 1.5 / 1e9)


def test_ceiling_is_sum_of_single_rails():
    assert ceiling_algbw_gbps([500, 500], 4) == pytest.approx(2 * single_rail_algbw_gbps(500, 4))


@pytest.mark.parametrize("rates,world", [([], 4), ([500, 0], 4), ([500], 0)])
def test_ceiling_rejects_bad_input(rates, world):
    with pytest.raises(ValueError):
        ceiling_algbw_gbps(rates, world)
