"""One scale run on a bed that is already up (runtime/tests/testbed/run_scale.sh makes it): N
nezha-bench ranks, RANKS_PER_HOST to a bed host, numbered host-major, in five phases. Writes the
raw measurements as JSON; bench/run_scale_runtime.py judges them (bench/README.md, "Runtime at
scale, as measured").

  startup      one 4-byte allreduce, checked: launch of the first rank -> the last rank's exit
  steady       a loop of 1 KiB allreduces (default policy): once 20 operations are done, every
               rank's sockets (/proc/PID/fd), threads (/proc/PID/task) and VmRSS; the loop's
               median operation time
  collectives  allreduce, allgather, reduce_scatter, alltoall, broadcast at 4 B - 4 MiB (factor
               32), every result checked on every rank (--check)
  kill         a 64 KiB allreduce loop; the last rank killed (SIGKILL) once it runs: every other
               rank exits 3, with its error line and when it exited after the kill
  cut          a 1 MiB split allreduce loop; host 1's rail r1 cut once it runs: every rank exact,
               exactly one failover (of r1), cut -> rank 0's agreed failover

    python3 -m bench.harness.scale_run --bed NAME --testbed hack/testbed.sh --bench NEZHA_BENCH
        --ranks N --token T --port P --work DIR --out FILE.json
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

RANKS_PER_HOST = 4
RAILS = 2
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast")
READY_WAIT_S = 120.0  # how long a loop job may take to reach its 20th operation before the run gives up
# A loop job's forced split (as lib.sh's loop_job): every operation split over both rails, so a cut
# always lands on a rail carrying a share.
SPLIT_ENV = ("NEZHA_COLD_THRESHOLD=0", "NEZHA_MIN_SLICE_BYTES=0", "NEZHA_IO_TIMEOUT_MS=10000")


class Bed:
    """Starts ranks on the bed's hosts. Each rank is `ip netns exec HOSTNS env ... nezha-bench`
    (exec all the way down), so the Popen's pid is the rank's own process: /proc reads and the
    kill phase's SIGKILL address exactly it."""

    def __init__(self, a):
        self.a = a
        self.port = a.port
        self.rdv_addr = subprocess.run([a.testbed, "addr", "--name", a.bed, "--host", "0", "--rail", "0"],
                                       check=True, capture_output=True, text=True).stdout.strip()

    def host_ns(self, host):
        return f"{self.a.bed}-h{host}"  # hack/testbed.sh host_ns

    def start(self, name, env, args):
        env = [*self.a.job_env.split(), *env]  # the run's knobs first: a phase's own settings win
        self.port += 1
        spec = ",".join(f"r{k}=r{k}:tcp" for k in range(RAILS))
        procs = []
        for rank in range(self.a.ranks):
            log = open(os.path.join(self.a.work, f"{name}.log.{rank}"), "w")
            cmd = ["ip", "netns", "exec", self.host_ns(rank // RANKS_PER_HOST), "env", f"NEZHA_RAILS={spec}",
                   f"NEZHA_RANK={rank}", f"NEZHA_WORLD_SIZE={self.a.ranks}",
                   f"NEZHA_RENDEZVOUS={self.rdv_addr}:{self.port}", f"NEZHA_JOB_TOKEN={self.a.token}",
                   "NEZHA_RENDEZVOUS_TIMEOUT_MS=60000", *env, self.a.bench, *args]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        return procs


def wait_all(procs):
    """Exit code and exit time (unix) of every rank, polled so each exit is timed on its own."""
    rc, ended = [None] * len(procs), [None] * len(procs)
    while any(r is None for r in rc):
        for i, p in enumerate(procs):
            if rc[i] is None and p.poll() is not None:
                rc[i], ended[i] = p.returncode, time.time()
        time.sleep(0.005)
    return rc, ended


def until_file(path, procs):
    """True once path exists; False if every rank ended or READY_WAIT_S passed first."""
    deadline = time.time() + READY_WAIT_S
    while time.time() < deadline:
        if os.path.exists(path):
            return True
        if all(p.poll() is not None for p in procs):
            return False
        time.sleep(0.02)
    return False


def proc_usage(pid):
    """Sockets, threads and resident memory of one live process."""
    fd_dir = f"/proc/{pid}/fd"
    sockets = 0
    for fd in os.listdir(fd_dir):
        try:
            sockets += os.readlink(os.path.join(fd_dir, fd)).startswith("socket:")
        except FileNotFoundError:  # closed between listdir and readlink
            pass
    rss_kib = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return {"sockets": sockets, "threads": len(os.listdir(f"/proc/{pid}/task")), "rss_bytes": rss_kib * 1024}


def load_trace(path):
    with open(path) as f:
        return json.load(f)


def error_line(path):
    """The rank's last `nezha-bench: ...` line (its error), or ''."""
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.startswith("nezha-bench:")]
    return lines[-1] if lines else ""


def phase_startup(bed, a):
    t0 = time.time()
    procs = bed.start("startup", [], ["--op", "allreduce", "--min-bytes", "4", "--max-bytes", "4", "--warmup", "0",
                                      "--iters", "1", "--check", "--quiet"])
    rc, ended = wait_all(procs)
    return {"rc": rc, "seconds": max(ended) - t0}


def phase_steady(bed, a):
    trace, ready = os.path.join(a.work, "steady.trace.json"), os.path.join(a.work, "steady.ready")
    procs = bed.start("steady", [], ["--quiet", "--max-bytes", "1K", "--loop-seconds", str(a.loop_seconds),
                                     "--trace", trace, "--ready-file", ready])
    usage = []
    if until_file(ready, procs):
        usage = [proc_usage(p.pid) for p in procs]
    rc, _ = wait_all(procs)
    out = {"rc": rc, "usage": usage}
    if os.path.exists(trace):
        t = load_trace(trace)
        durations = [d for _, d in t["ops"][20:]] or [d for _, d in t["ops"]]
        out.update(check=t["check"], completed=t["completed"],
                   allreduce_1k_median_s=statistics.median(durations) / 1e6 if durations else None)
    return out


def phase_collectives(bed, a):
    out = {}
    for op in COLLECTIVES:
        js = os.path.join(a.work, f"coll-{op}.json")
        procs = bed.start(f"coll-{op}", [], ["--op", op, "--min-bytes", "4", "--max-bytes", "4M", "--factor", "32",
                                              "--warmup", "1", "--iters", "3", "--check", "--quiet", "--json", js])
        rc, _ = wait_all(procs)
        rows = []
        if os.path.exists(js):
            with open(js) as f:
                rows = [{"bytes": r["bytes"], "time_us": r["time_us"], "busbw_gbps": r["busbw_gbps"], "check": r["check"]}
                        for r in json.load(f)["results"]]
        out[op] = {"rc": rc, "rows": rows, "error": next((error_line(os.path.join(a.work, f"coll-{op}.log.{i}"))
                                                         for i in range(a.ranks) if rc[i] != 0), "")}
    return out


def phase_cut(bed, a):
    trace, ready = os.path.join(a.work, "cut.trace.json"), os.path.join(a.work, "cut.ready")
    # Long enough that the 20 operations before the ready file (each slower as N grows) leave
    # most of the loop for the cut.
    secs = a.loop_seconds * 2 + a.ranks // 4
    procs = bed.start("cut", list(SPLIT_ENV), ["--quiet", "--max-bytes", "1M", "--loop-seconds", str(secs),
                                               "--trace", trace, "--ready-file", ready])
    cut_at = None
    if until_file(ready, procs):
        # The cut itself, as hack/testbed.sh cut does it (switch side of host 1's r1 down), run
        # here so the clock starts at the carrier loss and not at the script's own start-up.
        cut_at = time.time()
        subprocess.run(["ip", "-n", f"{a.bed}-sw", "link", "set", "h1r1", "down"], check=True)
    rc, _ = wait_all(procs)
    if cut_at is not None:
        subprocess.run([a.testbed, "restore", "--name", a.bed, "--host", "1", "--rail", "1"], check=True,
                       stdout=subprocess.DEVNULL)
    out = {"rc": rc, "cut_unix": cut_at}
    if os.path.exists(trace):
        t = load_trace(trace)
        fo = t["failovers"]
        out.update(check=t["check"], completed=t["completed"],
                   failovers=[{"rail": f["rail"], "reason": f.get("reason"), "ranks": f.get("ranks"), "t_unix": f["t_unix"]}
                              for f in fo],
                   agreed_s=(fo[0]["t_unix"] - cut_at) if fo and cut_at else None)
    return out


def phase_kill(bed, a):
    ready = os.path.join(a.work, "kill.ready")
    procs = bed.start("kill", [], ["--quiet", "--max-bytes", "64K", "--loop-seconds", str(a.loop_seconds * 4),
                                   "--trace", os.path.join(a.work, "kill.trace.json"), "--ready-file", ready])
    victim, killed_at = a.ranks - 1, None
    if until_file(ready, procs):
        killed_at = time.time()
        os.kill(procs[victim].pid, signal.SIGKILL)
    rc, ended = wait_all(procs)
    others = [i for i in range(a.ranks) if i != victim]
    return {"victim": victim, "killed_unix": killed_at, "rc": rc,
            "exit_after_kill_s": [ended[i] - killed_at if killed_at else None for i in others],
            "errors": [error_line(os.path.join(a.work, f"kill.log.{i}")) for i in others]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--bed", "--testbed", "--bench", "--token", "--work", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--loop-seconds", type=int, default=6)
    ap.add_argument("--job-env", default="", help="VAR=VALUE ... given to every rank of every phase (the run's knobs)")
    a = ap.parse_args(argv)
    bad = [kv for kv in a.job_env.split() if not kv.startswith("NEZHA_") or "=" not in kv]
    if bad:
        ap.error(f"--job-env: want NEZHA_VAR=VALUE words, got {' '.join(bad)}")
    if a.ranks % RANKS_PER_HOST or a.ranks < 2 * RANKS_PER_HOST:
        ap.error(f"--ranks: want a multiple of {RANKS_PER_HOST} spanning at least 2 hosts, got {a.ranks}")
    bed = Bed(a)
    res = {"ranks": a.ranks, "hosts": a.ranks // RANKS_PER_HOST, "job_env": a.job_env.split(), "ranks_per_host": RANKS_PER_HOST, "rails": RAILS,
           "load_before": os.getloadavg(), "started_unix": time.time()}
    # The kill before the cut: a job started right after the cut rail's restore would meet a rail
    # still coming back, which is the cut's story, not the kill's.
    for name, phase in (("startup", phase_startup), ("steady", phase_steady), ("collectives", phase_collectives),
                        ("kill", phase_kill), ("cut", phase_cut)):
        print(f"scale_run: N={a.ranks}: {name}", file=sys.stderr, flush=True)
        res[name] = phase(bed, a)
    res["load_after"] = os.getloadavg()
    res["took_s"] = time.time() - res["started_unix"]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
