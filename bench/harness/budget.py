"""Time estimates for a band of sizes: printed before a run, and turned into a generous timeout
per tool launch so a hung rank (a dead rail under Gloo blocks until its own timeout) can never
hang the whole benchmark."""

from .sizes import Band

# Per-op overhead on a busy 2-core VM (4 processes, TCP round trips, scheduling): a 1 KiB
# allreduce at 4 ranks takes 0.1-0.4 ms here (bench/results/latest.json), so 1.5 ms is a margin
# (and launch_timeout adds 4x and a minute on top).
PER_OP_SECONDS = 0.0015
# Process start, rendezvous, and (nezha static) the bandwidth probe.
LAUNCH_SECONDS = 2.0


def band_seconds(band: Band, algbw_gbps: float, warmup: int | None = None, paired: bool = False) -> float:
    """Expected wall time of one launch running `band` at a steady algbw (GB/s); `paired`: the
    launch also runs every op under the band's paired policy (series.paired_args)."""
    if algbw_gbps <= 0:
        raise ValueError(f"algbw_gbps: want > 0, got {algbw_gbps}")
    ops = (band.warmup if warmup is None else warmup) + band.iters
    if paired:
        ops *= 2
    sizes = band.sizes()
    transfer = sum(sizes) * ops / (algbw_gbps * 1e9)
    return LAUNCH_SECONDS + transfer + PER_OP_SECONDS * ops * len(sizes)


def band_seconds_all_repeats(band: Band, algbw_gbps: float, warmup: int | None = None,
                             paired: bool = False) -> float:
    return band.repeats * band_seconds(band, algbw_gbps, warmup, paired)


def launch_timeout(expected_s: float) -> float:
    """4x the estimate plus a minute: slow is reported, only a real hang is killed."""
    return 4.0 * expected_s + 60.0
