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
