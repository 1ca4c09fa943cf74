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


def collect() -> dict:
    return {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "mem_gib": _mem_gib(),
        "kernel": platform.release(),
        "setup": SETUP_DESCRIPTION,
        "loadavg_start": list(os.getloadavg()),
        "versions": {
            "gloo": _gloo_version() + " (Debian libgloo-dev)",
            "iperf3": _version(["iperf3", "--version"]),
            "python": platform.python_version(),
        },
    }
