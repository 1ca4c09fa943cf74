"""Where a rank's CPU cycles go, from `perf record` of one process (bench/README.md, "Unshaped
rails"): perf's self-time per (object, symbol), summed into the buckets a cost-per-byte question
asks about. Pure parts only (the run is bench/run_unshaped.py --profile).

Buckets, first match wins:
  copies      memcpy/memmove in user space, the kernel's copies to and from user memory, skb copies
  reductions  the element-wise reduce loops (Nezha's reduceInto, Gloo's sum, ...)
  kernel      everything else in the kernel: system calls, the TCP/IP stack and veth, scheduling, locks
  user other  everything else in user space (threads' hand-offs, bookkeeping, the tool itself)
"""

import re
from dataclasses import dataclass

COPIES, REDUCTIONS, KERNEL, USER_OTHER = "copies", "reductions", "kernel (syscalls, TCP/IP, scheduling)", "user other"
BUCKETS = (COPIES, REDUCTIONS, KERNEL, USER_OTHER)

_COPY = re.compile(r"memcpy|memmove|copy_user|_copy_to_|_copy_from_|copy_page|rep_mov|skb_copy|csum_partial_copy|"
                   r"copyout|copyin|copy_to_iter|copy_from_iter|__memcpy", re.IGNORECASE)
_REDUCE = re.compile(r"reduce|gloo::sum|\bsum<|::sum\b|accumulate|elementwise", re.IGNORECASE)
# A line of `perf report --stdio -q --no-children --sort dso,sym`: "  12.34%  dso  [k] symbol".
_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[([k.])\]\s+(.+?)\s*$")


@dataclass(frozen=True)
class Sample:
    percent: float
    dso: str
    kernel: bool
    symbol: str


def perf_record_argv(data_path: str, freq_hz: int = 499) -> list[str]:
    """The prefix that profiles one process and its threads (no call graphs: self time only)."""
    return ["perf", "record", "-q", "-F", str(freq_hz), "-o", data_path, "--"]


def perf_report_argv(data_path: str) -> list[str]:
    return ["perf", "report", "-i", data_path, "--stdio", "-q", "--no-children", "--sort", "dso,sym"]


def parse_report(text: str) -> list[Sample]:
    """Every symbol line of perf report's output; headers, blank and comment lines are skipped."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append(Sample(float(m.group(1)), m.group(2), m.group(3) == "k", m.group(4)))
    return out


def bucket(s: Sample) -> str:
    if _COPY.search(s.symbol):
        return COPIES
    if not s.kernel and _REDUCE.search(s.symbol):
        return REDUCTIONS
    return KERNEL if s.kernel else USER_OTHER


def summarize(samples: list[Sample], top: int = 5) -> dict:
    """{"buckets": {bucket: percent of samples}, "top": [(percent, symbol, bucket)...]}. Percent of
    all the process's samples; a report with no sample line is an error (perf saw nothing)."""
    if not samples:
        raise ValueError("perf report: no samples (was the process profiled?)")
    shares = {b: 0.0 for b in BUCKETS}
    for s in samples:
        shares[bucket(s)] += s.percent
    ranked = sorted(samples, key=lambda s: -s.percent)[:top]
    return {"buckets": {b: round(v, 1) for b, v in shares.items()},
            "top": [[round(s.percent, 1), s.symbol, bucket(s)] for s in ranked]}


def summary_line(name: str, prof: dict) -> str:
    """One line for the report: the buckets, then the hottest symbols."""
    parts = ", ".join(f"{b} {prof['buckets'][b]:.0f} %" for b in BUCKETS)
    hot = "; ".join(f"{sym} {pct:.0f} %" for pct, sym, _ in prof["top"][:3])
    return f"{name}: {parts} (hottest: {hot})"
