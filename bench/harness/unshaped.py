"""The suite's goals on UNSHAPED rails (no TBF: the 2 cores, not the wire, are the limit): the pure logic
of bench/run_unshaped.py. How many ops each launch runs, the CPU cost of the timed ops (with the
launch's fixed cost - start, rendezvous, probe, warmup - subtracted), cycles per byte, and the
two verdicts:

  (B) nezha-single busbw >= 1.05x gloo-best-rail at every size >= 64 KiB (same rail);
  (U) the best Nezha series' busbw >= 1.2x gloo-best-rail at every size;
  (C) nezha-adaptive (two rails) moves >= 1.3x the bytes per CPU second of gloo-best-rail (one
      rail) at every size: gloo's CPU cycles per byte over Nezha's.

Fixed cost out: every (series, size) runs twice with the same warmup, a short launch of n_s timed
ops and a long one of n_l. Whatever a launch spends outside its timed loop is the same in both,
so (cpu_long - cpu_short) / (n_l - n_s) is the CPU of one steady-state op, and
cpu_short - n_s x that is the fixed cost (reported separately)."""

from dataclasses import dataclass, field
from statistics import median
from typing import Optional

GOAL_SINGLE_VS_GLOO = 1.05  # (B)
GOAL_BEST_VS_GLOO = 1.2  # (U)
GOAL_BYTES_PER_CPU = 1.3  # (C)
B_MIN_BYTES = 64 << 10

SINGLE = "nezha-single"
ADAPTIVE = "nezha-adaptive"
GLOO = "gloo-best-rail"


# ---- what the machine says about itself -----------------------------------------------------
def nominal_mhz(cpuinfo_text: str) -> float:
    """The first "cpu MHz" of /proc/cpuinfo. On this VM it is the host's nominal clock (the guest
    cannot see turbo or frequency changes), so cycles derived from it are nominal cycles."""
    for line in cpuinfo_text.splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":", 1)[1])
    raise ValueError("/proc/cpuinfo: no 'cpu MHz' line")


def busy_ticks(proc_stat_text: str) -> int:
    """Busy clock ticks of the whole machine (the aggregate "cpu" line of /proc/stat: user, nice,
    system, irq, softirq, steal; not idle or iowait). Differences of it count the softirq work
    that lands in ksoftirqd too, which no rank's rusage sees - and everyone else's work."""
    for line in proc_stat_text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            v = [int(x) for x in parts[1:9]]
            user, nice, system, _idle, _iowait, irq, softirq, steal = v
            return user + nice + system + irq + softirq + steal
    raise ValueError("/proc/stat: no aggregate 'cpu' line")


# ---- how many ops -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    size: int
    warmup: int
    short_iters: int
    long_iters: int


def plan_size(size: int, target_bytes: int, warmup_bytes: int, min_iters: int = 10,
              max_iters: int = 4000) -> Plan:
    """The long launch reduces ~target_bytes (min_iters..max_iters ops), the short one a fifth of
    that (at least 2 ops), both after ~warmup_bytes of warmup (3..20 ops)."""
    if size <= 0 or target_bytes <= 0 or warmup_bytes < 0:
        raise ValueError(f"plan_size: want size, target > 0, got {size}, {target_bytes}")
    long_iters = max(min_iters, min(max_iters, target_bytes // size))
    short_iters = max(2, long_iters // 5)
    warmup = max(3, min(20, warmup_bytes // size))
    return Plan(size, warmup, short_iters, long_iters)


# ---- CPU of the timed ops -----------------------------------------------------------------------
@dataclass
class Launch:
    """One launch's measurements: timed ops, CPU seconds (user+sys, all ranks), the tool's busbw."""
    iters: int
    cpu_s: float
    busbw_gbps: float
    machine_busy_s: Optional[float] = None  # whole machine over the launch, if recorded


@dataclass
class Cost:
    cpu_per_op_s: float
    fixed_cpu_s: float  # start + rendezvous + probe + warmup + check, all ranks
    machine_per_op_s: Optional[float] = None


def steady_cost(short: Launch, long: Launch) -> Cost:
    """CPU of one timed op from the difference of the two launches (see the module docstring)."""
    if long.iters <= short.iters:
        raise ValueError(f"steady_cost: the long launch needs more ops ({long.iters} <= {short.iters})")
    per_op = (long.cpu_s - short.cpu_s) / (long.iters - short.iters)
    machine = None
    if short.machine_busy_s is not None and long.machine_busy_s is not None:
        machine = (long.machine_busy_s - short.machine_busy_s) / (long.iters - short.iters)
    return Cost(per_op, short.cpu_s - short.iters * per_op, machine)


def cycles_per_byte(cpu_per_op_s: float, mhz: float, size: int) -> float:
    """CPU seconds of one op (all ranks) x nominal clock / the bytes one op reduces (its size)."""
    return cpu_per_op_s * mhz * 1e6 / size


@dataclass
class Cell:
    """One series at one size over its repeats: medians of busbw and of the per-op CPU."""
    size: int
    busbw_gbps: float
    cpu_per_op_s: float
    fixed_cpu_s: float
    cycles_per_byte: float
    machine_cycles_per_byte: Optional[float]
    repeats: int
    busbw_all: list = field(default_factory=list)


def summarize(size: int, pairs: list[tuple[Launch, Launch]], mhz: float) -> Cell:
    """Median over repeats of (short, long) pairs; busbw is the long launch's (more ops)."""
    if not pairs:
        raise ValueError("summarize: no measurements")
    costs = [steady_cost(s, lg) for s, lg in pairs]
    per_op = median(c.cpu_per_op_s for c in costs)
    machines = [c.machine_per_op_s for c in costs if c.machine_per_op_s is not None]
    busbw = [lg.busbw_gbps for _, lg in pairs]
    return Cell(size=size, busbw_gbps=median(busbw), cpu_per_op_s=per_op,
                fixed_cpu_s=median(c.fixed_cpu_s for c in costs),
                cycles_per_byte=cycles_per_byte(per_op, mhz, size),
                machine_cycles_per_byte=cycles_per_byte(median(machines), mhz, size) if machines else None,
                repeats=len(pairs), busbw_all=busbw)


# ---- verdicts ---------------------------------------------------------------------------------
def ratios(cells: dict[str, dict[int, Cell]], series: str, base: str = GLOO) -> dict[int, float]:
    """size -> busbw(series) / busbw(base), at the sizes both measured (base > 0)."""
    a, b = cells.get(series, {}), cells.get(base, {})
    return {s: a[s].busbw_gbps / b[s].busbw_gbps for s in sorted(a) if s in b and b[s].busbw_gbps > 0}


def best_nezha_ratios(cells: dict[str, dict[int, Cell]],
                      candidates: tuple[str, ...] = (SINGLE, ADAPTIVE)) -> dict[int, tuple[str, float]]:
    """size -> (the faster Nezha series, its busbw / gloo's)."""
    out: dict[int, tuple[str, float]] = {}
    for name in candidates:
        for s, r in ratios(cells, name).items():
            if s not in out or r > out[s][1]:
                out[s] = (name, r)
    return out


def bytes_per_cpu_ratios(cycles: dict[str, dict[int, float]], series: str = ADAPTIVE,
                         base: str = GLOO) -> dict[int, float]:
    """size -> bytes per CPU second of `series` over `base`'s, from cycles per byte (size ->
    cycles/B per series): base's cycles per byte / series'. > 1: the series moves more per cycle."""
    a, b = cycles.get(series, {}), cycles.get(base, {})
    return {s: b[s] / a[s] for s in sorted(a) if s in b and a[s] > 0}


def judge(per_size: dict[int, float], goal: float, min_bytes: int, want_sizes: list[int]) -> dict:
    """PASS when every wanted size >= min_bytes has a ratio >= goal; a missing size is a MISS
    (never judged on what was not measured)."""
    judged = [s for s in want_sizes if s >= min_bytes]
    missing = [s for s in judged if s not in per_size]
    below = [s for s in judged if s in per_size and per_size[s] < goal]
    worst = min((per_size[s] for s in judged if s in per_size), default=None)
    status = "PASS" if judged and not missing and not below else "MISS"
    return {"status": status, "goal": goal, "worst": worst, "below": below, "missing": missing}


def verdicts(cells: dict[str, dict[int, Cell]], sizes: list[int]) -> dict:
    b = judge(ratios(cells, SINGLE), GOAL_SINGLE_VS_GLOO, B_MIN_BYTES, sizes)
    best = best_nezha_ratios(cells)
    u = judge({s: r for s, (_, r) in best.items()}, GOAL_BEST_VS_GLOO, 0, sizes)
    u["best_series"] = {s: n for s, (n, _) in best.items()}
    cycles = {n: {s: c.cycles_per_byte for s, c in by.items()} for n, by in cells.items()}
    c = judge(bytes_per_cpu_ratios(cycles), GOAL_BYTES_PER_CPU, 0, sizes)
    if ADAPTIVE not in cells:
        u["status"] = "N/A"  # a run without nezha-adaptive (a knob run) does not judge "best Nezha"
        c["status"] = "N/A"
    return {"B": b, "U": u, "C": c}


# ---- knob series ------------------------------------------------------------------------------
def parse_knob(text: str) -> tuple[str, dict[str, str]]:
    """"NEZHA_STREAMS_PER_PEER=1[,NEZHA_X=Y]" -> ("nezha-single[STREAMS_PER_PEER=1,X=Y]", env):
    a nezha-single series run with those variables, measured beside the others."""
    env = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.startswith("NEZHA_") or not value or not name[6:].replace("_", "").isalnum():
            raise ValueError(f"--knob: want NEZHA_NAME=VALUE[,NEZHA_NAME=VALUE], got {text!r}")
        env[name] = value
    label = ",".join(f"{k[6:]}={v}" for k, v in env.items())
    return f"{SINGLE}[{label}]", env
