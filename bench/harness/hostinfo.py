"""What the benchmark ran on, recorded with every result (numbers without hardware are noise)."""

import os
import platform
import socket
import subprocess

from .config import SETUP_DESCRIPTION


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return None


def _version(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (p.stdout or p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def _gloo_version() -> str:
    try:
        with open("/usr/include/gloo/config.h") as f:
            v = {}
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("GLOO_VERSION_"):
                    v[parts[1]] = parts[2]
        return f"{v['GLOO_VERSION_MAJOR']}.{v['GLOO_VERSION_MINOR']}.{v['GLOO_VERSION_PATCH']}"
    except (OSError, KeyError):
        return "unknown"


def _tcp_congestion_control() -> str:
    # What a bed's namespaces inherit unless run_bench.py --tcp-cc picks one (hack/testbed.sh).
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def allowed_tcp_congestion_controls() -> list[str]:
    """The algorithms a network namespace other than the machine's may pick (a kernel rule)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []


def tcp_cc_error(name: str) -> str:
    """Why --tcp-cc NAME cannot be used for a bed's hosts, or "" if it can (or NAME is "")."""
    allowed = allowed_tcp_congestion_controls()
    if not name or name in allowed:
        return ""
    return (f"--tcp-cc: {name!r} is not one a network namespace may use here (want one of "
            f"{' '.join(allowed)}: net.ipv4.tcp_allowed_congestion_control)")


def collect(tcp_cc: str = "") -> dict:
    """tcp_cc: the congestion control the bed was given, "" when it inherits the machine's."""
    return {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "mem_gib": _mem_gib(),
        "kernel": platform.release(),
        "tcp_congestion_control": tcp_cc or _tcp_congestion_control(),
        "setup": SETUP_DESCRIPTION,
        "loadavg_start": list(os.getloadavg()),
        "versions": {
            "gloo": _gloo_version() + " (Debian libgloo-dev)",
            "iperf3": _version(["iperf3", "--version"]),
            "python": platform.python_version(),
        },
    }
