"""Runs one scenario of workers.py as N real processes (ranks) with this interpreter (the pinned
torch venv) and collects their reports. A hard timeout per run turns a hang into a failure that
shows every rank's output."""
import json
import os
import random
import secrets
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RUN_TIMEOUT_S = 150


def free_port_pair():
    """A port p with p and p+1 both free (torch's store, then NEZHA_RENDEZVOUS = p+1)."""
    for _ in range(200):
        p = random.randint(20000, 40000)
        socks = []
        try:
            for q in (p, p + 1):
                s = socket.socket()
                s.bind(("127.0.0.1", q))
                socks.append(s)
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair")


def loopback_rails(n):
    return ",".join(f"r{i}=lo:tcp" for i in range(n))


def base_env(world, rails=2):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEZHA_")}
    path = [HERE, os.path.join(REPO, "examples")]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])  # where `pip install --target` put the package
    env.update({
        "PYTHONPATH": os.pathsep.join(path),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port_pair()),
        "WORLD_SIZE": str(world),
        "NEZHA_RAILS": loopback_rails(rails),
        "NEZHA_RENDEZVOUS_TIMEOUT_MS": "30000",
        "NEZHA_IO_TIMEOUT_MS": "20000",
        "NEZHA_PROBE_BYTES": "256K",
        "NEZHA_JOB_TOKEN": secrets.token_hex(32),
        "OMP_NUM_THREADS": "1",
    })
    return env


def native_stacks(proc):
    """Every thread's native stack of a hung rank (gdb), so a hang shows where it waits."""
    if proc.poll() is not None:
        return ""
    try:
        return subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt 25"],
                              capture_output=True, text=True, timeout=60).stdout[-12000:]
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(no stacks: {e})"


def run(scenario, world, env, args=(), prefix=None):
    """prefix(rank) -> argv prefix (hack/testbed.sh exec ...) for ranks in other namespaces."""
    procs = []
    for rank in range(world):
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        argv = (prefix(rank) if prefix else []) + [sys.executable, os.path.join(HERE, "workers.py"), scenario, *args]
        procs.append(subprocess.Popen(argv, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stacks = [native_stacks(q) for q in procs]
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out = f"TIMEOUT after {RUN_TIMEOUT_S}s\n{out}\n" + "\n".join(stacks)
        report = None
        for line in out.splitlines():
            if line.startswith("REPORT "):
                report = json.loads(line[len("REPORT "):])
        results.append((p.returncode, report, out))
    return results


def describe(results):
    return "\n".join(f"--- rank {i} rc={rc}\n{out[-16000:]}" for i, (rc, _, out) in enumerate(results))


def reports(results):
    assert all(rc == 0 and r is not None for rc, r, _ in results), describe(results)
    return [r for _, r, _ in results]
