"""iperf3 on the bed: what a plain TCP flow really gets out of each TBF-shaped rail (~95% of the
rate: L2 overhead), alone and with all rails at once. The measured sum gives the second,
achievable ceiling next to the theoretical one from the TBF rates."""

import json
import subprocess
import time

from .testbed import Testbed

BASE_PORT = 5301


def _server(bed: Testbed, host: int, rail: int, port: int) -> subprocess.Popen:
    # -1: serve one client then exit, so nothing is left running.
    return subprocess.Popen(bed.exec_argv(host, ["iperf3", "-s", "-1", "-B", bed.addr(host, rail),
                                                 "-p", str(port)]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _client(bed: Testbed, host: int, peer: int, rail: int, port: int, seconds: int) -> subprocess.Popen:
    return subprocess.Popen(bed.exec_argv(host, ["iperf3", "-c", bed.addr(peer, rail), "-B",
                                                 bed.addr(host, rail), "-p", str(port), "-t", str(seconds),
                                                 "-J"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _received_mbit(out: str, what: str) -> float:
    try:
        doc = json.loads(out)
        return doc["end"]["sum_received"]["bits_per_second"] / 1e6
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"iperf3 {what}: unreadable result ({e}): {out[:300]}") from None


def measure_rails(bed: Testbed, rails: list[int], seconds: int, src: int = 0, dst: int = 1) -> list[float]:
    """Mbit/s from host src to host dst on each rail in `rails`, all flows running at once."""
    servers = [_server(bed, dst, k, BASE_PORT + k) for k in rails]
    try:
        time.sleep(0.5)  # let the servers bind before clients connect
        clients = [_client(bed, src, dst, k, BASE_PORT + k, seconds) for k in rails]
        outs = [c.communicate(timeout=seconds + 30) for c in clients]
        result = []
        for k, c, (out, err) in zip(rails, clients, outs):
            if c.returncode != 0:
                raise RuntimeError(f"iperf3 on rail {k} failed ({c.returncode}): {err.strip()[:300]}")
            result.append(_received_mbit(out, f"rail {k}"))
        return result
    finally:
        for s in servers:
            try:
                s.wait(timeout=5)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()


def efficiency(bed: Testbed, rates_mbit: list[int], seconds: int) -> dict:
    """Each rail alone, then all rails together; efficiency = measured / TBF rate."""
    alone = [measure_rails(bed, [k], seconds)[0] for k in range(len(rates_mbit))]
    together = measure_rails(bed, list(range(len(rates_mbit))), seconds)
    total = sum(together)
    return {
        "seconds": seconds,
        "alone_mbit": alone,
        "together_mbit": together,
        "together_sum_mbit": total,
        "efficiency_alone": [a / r for a, r in zip(alone, rates_mbit)],
        "efficiency_together": total / sum(rates_mbit),
    }
