"""Runs one scenario of nezha_workers.py as N real processes (ranks) and collects their reports.

Every rank is a separate interpreter, so each loads libnezha on its own, like a real job.
A hard timeout per run turns a hang into a test failure that shows every rank's output.
"""
import json
import os
import secrets
import random
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))

PYTHON = sys.executable  # the pinned torch venv (make test-python)
RUN_TIMEOUT_S = 90


def free_port_pair():
    """A port p with p and p+1 both free (torch's store, then NEZHA_RENDEZVOUS = p+1)."""
    for _ in range(200):
        p = random.randint(20000, 40000)
        socks = []
        try:
            for q in (p, p + 1):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", q))
                socks.append(s)
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair")


def base_env(world, rails="r0=lo:tcp,r1=lo:tcp"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEZHA_") or k == "NEZHA_LIBRARY"}
    env.update({
        "PYTHONPATH": PKG_ROOT + os.pathsep + HERE,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port_pair()),
        "WORLD_SIZE": str(world),
        "NEZHA_RAILS": rails,
        "NEZHA_RENDEZVOUS_TIMEOUT_MS": "15000",
        "NEZHA_IO_TIMEOUT_MS": "15000",
        "NEZHA_PROBE_BYTES": "256K",
        # Every rank gets the job's secret from its environment (as the operator injects it);
        # Nezha never passes it through torch's unauthenticated store.
        "NEZHA_JOB_TOKEN": secrets.token_hex(32),
        "OMP_NUM_THREADS": "1",
    })
    return env


def run(scenario, world, env, prefix=None, rank_env=None):
    """Starts `world` ranks of `scenario`; returns [(returncode, report dict or None, output)].

    prefix(rank) -> argv prefix (e.g. `ip netns exec ...`) for ranks in other namespaces;
    rank_env(rank) -> extra env for that rank."""
    procs = []
    for rank in range(world):
        e = dict(env, RANK=str(rank))
        if rank_env:
            e.update(rank_env(rank))
        argv = (prefix(rank) if prefix else []) + [PYTHON, os.path.join(HERE, "nezha_workers.py"), scenario]
        procs.append(subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out = f"TIMEOUT after {RUN_TIMEOUT_S}s\n{out}"
        report = None
        for line in out.splitlines():
            if line.startswith("REPORT "):
                report = json.loads(line[len("REPORT "):])
        results.append((p.returncode, report, out))
    return results


def describe(results):
    return "\n".join(f"--- rank {i} rc={rc}\n{out[-3000:]}" for i, (rc, _, out) in enumerate(results))
