"""Starting one process per rank inside the bed's namespaces and collecting them: every rank's
exit status and log, a bounded wait (a hung collective is killed, never waited on forever)."""

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .testbed import Testbed


@dataclass
class LaunchResult:
    returncodes: list[int | None]
    seconds: float
    timed_out: bool
    logs: list[str] = field(default_factory=list)  # per-rank log file paths

    def ok(self) -> bool:
        return not self.timed_out and all(rc == 0 for rc in self.returncodes)

    def failure(self) -> str:
        """A one-line reason with each failing rank's last stderr line."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f}s (ranks killed)"
        bad = []
        for rank, (rc, log) in enumerate(zip(self.returncodes, self.logs)):
            if rc != 0:
                bad.append(f"rank {rank} exit {rc}: {last_line(log)}")
        return "; ".join(bad)


def last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return lines[-1][:300] if lines else "(no output)"
    except OSError:
        return "(no log)"


def run_ranks(bed: Testbed, world: int, argv_for: Callable[[int], Sequence[str]],
              env_for: Callable[[int], dict], timeout_s: float, log_dir: str, tag: str,
              on_started: Callable[[float], None] | None = None) -> LaunchResult:
    """Run rank r = argv_for(r) in host r's namespace with env_for(r) added to our environment.

    on_started(t0) is called once every rank is running (the chaos scenario's hook to cut a rail
    while the ranks work); it runs in this thread, so it must return quickly or be the timer."""
    os.makedirs(log_dir, exist_ok=True)
    procs, logs, files = [], [], []
    t0 = time.monotonic()
    try:
        for rank in range(world):
            log = os.path.join(log_dir, f"{tag}.rank{rank}.log")
            f = open(log, "w")
            files.append(f)
            logs.append(log)
            env = {**os.environ, **env_for(rank)}
            # Own session per rank: on timeout the whole process group (mptcpize -> tool) goes.
            procs.append(subprocess.Popen(bed.exec_argv(rank, list(argv_for(rank))), env=env,
                                          stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        if on_started:
            on_started(t0)
        deadline = t0 + timeout_s
        timed_out = False
        for p in procs:
            left = deadline - time.monotonic()
            try:
                p.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        # Reached with live ranks only on timeout or an exception here: end what we started.
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for f in files:
            f.close()
    return LaunchResult([p.returncode for p in procs], time.monotonic() - t0, timed_out, logs)


def torch_bench_missing(python: str, pkg: str) -> str:
    """Why a torch benchmark on the bed cannot run ("" when it can): it needs root (network
    namespaces), the pinned venv's python and the built package (make build-torch)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for p in (python, os.path.join(pkg, "nezha")):
        if not os.path.exists(p):
            return f"missing {p} (run: make build-torch)"
    return ""


def add_torch_bench_args(ap, rate_mbit: int) -> None:
    """The options every torch benchmark on the bed takes: the venv's python and the rails' rate."""
    ap.add_argument("--python", required=True, help="the torch venv's python (hack/versions.sh NEZHA_TORCH_VENV)")
    ap.add_argument("--rate", type=int, default=rate_mbit,
                    help=f"each rail's TBF rate, Mbit/s (default {rate_mbit})")


def torch_rank_env(bed: Testbed, rank: int, world: int, port: int, pkg: str, token: str) -> dict:
    """A torch rank's environment on the bed's two rails r0/r1: torch's store on host 0's first
    rail at `port` (nezha's rendezvous at port + 1), the package from `pkg`."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": bed.addr(0, 0), "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": pkg, "NEZHA_RAILS": "r0=r0:tcp,r1=r1:tcp", "NEZHA_JOB_TOKEN": token,
            "NEZHA_RENDEZVOUS_TIMEOUT_MS": "60000", "NEZHA_IO_TIMEOUT_MS": "30000"}
