"""Message sizes: parsing "256M"-style flags, pretty printing, and the size bands the harness
runs as separate tool invocations so big sizes get fewer iterations (bounds the run time)."""

from dataclasses import dataclass

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(what: str, text: str) -> int:
    """Parse 4096, 1K, 256M, 1G (binary multiples), as nezha-bench and gloo-bench do."""
    t = text.strip()
    digits = len(t) - len(t.lstrip("0123456789"))
    num, unit = t[:digits], t[digits:].upper()
    if not num or unit not in _UNITS:
        raise ValueError(f"{what}: want a size like 4096, 1K, 256M, got {text!r}")
    return int(num) * _UNITS[unit]


def format_bytes(n: int) -> str:
    """Shortest exact binary form: 1024 -> 1K, 268435456 -> 256M, 1000 -> 1000."""
    for unit in ("G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


def sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min, min*factor, ... while <= max (the tools' own sweep rule)."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"sweep: want 1 <= min <= max and factor >= 2, got {min_bytes}, {max_bytes}, {factor}")
    out, b = [], min_bytes
    while b <= max_bytes:
        out.append(b)
        b *= factor
    return out


@dataclass(frozen=True)
class Band:
    """One tool invocation: sizes [min_bytes, max_bytes] with the same warmup/iters."""

    min_bytes: int
    max_bytes: int
    warmup: int
    iters: int
    # Launches per series; sizes take the median launch. Small, latency-bound sizes are the most
    # disturbed by a busy machine and the cheapest to repeat.
    repeats: int = 1
    # Each rank pinned to one core (rank % cores, `taskset`), every series alike. For the
    # latency-bound band: there a 1 KiB allreduce is ~100 us, and where the kernel happens to
    # place (and move) 4 ranks on 2 cores swung whole launches by 15-40 % — more than the 5 %
    # the latency goal judges. Bands that move bytes stay unpinned: their ranks' rail threads
    # need both cores.
    pinned: bool = False
    # A policy the adaptive series also runs in the same launch, on a second communicator,
    # interleaved with its own operations (nezha-bench --paired-policy): the latency goal's ratio
    # then comes from one launch, side by side. Separate launches differ by more than the 5 %
    # judged even pinned: a launch the machine slows, it slows as a whole (bench/README.md,
    # "Latency, side by side").
    paired: str = ""

    def sizes(self, factor: int = 2) -> list[int]:
        return sweep(self.min_bytes, self.max_bytes, factor)

    def label(self) -> str:
        return f"{format_bytes(self.min_bytes)}-{format_bytes(self.max_bytes)}"


def clip_bands(bands: list[Band], min_bytes: int, max_bytes: int) -> list[Band]:
    """Restrict bands to [min_bytes, max_bytes], dropping empty ones (for --min/--max-bytes)."""
    out = []
    for b in bands:
        lo, hi = max(b.min_bytes, min_bytes), min(b.max_bytes, max_bytes)
        if lo <= hi:
            # Keep the band's own power-of-two grid: start at the first grid point >= lo.
            start = b.min_bytes
            while start < lo:
                start *= 2
            if start <= hi:
                out.append(Band(start, hi, b.warmup, b.iters, b.repeats, b.pinned, b.paired))
    return out
