"""The sum-of-rails ceiling: the best algbw a bandwidth-bound ring allreduce could reach if every
rail of every host were busy all the time.

Ring allreduce sends 2(N-1)/N of the message out of each rank (reduce-scatter + allgather), all
ranks at once, so time >= 2(N-1)/N * S / sum(rail rates) and
algbw = S / time <= sum(rates) / (2(N-1)/N). TBF shapes each host's egress per rail, so the sum
of one host's egress rates is the bound. Latency is ignored: this is the large-message limit."""

MBIT = 1e6 / 8  # bytes per second in one Mbit/s


def ring_allreduce_bus_factor(world_size: int) -> float:
    if world_size < 1:
        raise ValueError(f"world_size: want >= 1, got {world_size}")
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 1.0


def ceiling_algbw_gbps(rates_mbit: list[float], world_size: int) -> float:
    """algbw ceiling in GB/s (1e9 bytes/s, the tools' unit) for per-host egress rail rates."""
    if not rates_mbit or any(r <= 0 for r in rates_mbit):
        raise ValueError(f"rates_mbit: want positive Mbit/s per rail, got {rates_mbit}")
    return sum(rates_mbit) * MBIT / ring_allreduce_bus_factor(world_size) / 1e9


def single_rail_algbw_gbps(rate_mbit: float, world_size: int) -> float:
    return ceiling_algbw_gbps([rate_mbit], world_size)
