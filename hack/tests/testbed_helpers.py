"""Helpers for driving hack/testbed.sh from pytest: run the script, start servers inside a host
namespace, measure a TCP flow with iperf3 and probe reachability.

Every test bed a test creates carries the `nzt` prefix so concurrent runs of other suites (which
use their own prefixes) never collide with ours.
"""

import contextlib
import json
import os
import subprocess
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTBED = os.path.join(REPO, "hack", "testbed.sh")
PYTHON = "/usr/bin/python3"

# A TCP listener that accepts and closes connections forever; reachability probes connect to it.
_LISTENER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.close()
"""

_CONNECT = """
import socket, sys
dst, port, src, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    socket.create_connection((dst, port), timeout=timeout, source_address=(src, 0)).close()
except OSError as e:
    print(e, file=sys.stderr)
    sys.exit(1)
"""


def tb(*args, check=True):
    """Runs hack/testbed.sh with ARGS; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([TESTBED, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"testbed.sh {' '.join(map(str, args))} failed rc={proc.returncode}:\n{proc.stderr}"
        )
    return proc


def netns_names():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def addr(name, host, rail):
    return tb("addr", "--name", name, "--host", host, "--rail", rail).stdout.strip()


def in_host(name, host, *argv):
    """argv to run a command inside host HOST of test bed NAME."""
    return [TESTBED, "exec", "--name", name, "--host", str(host), "--", *map(str, argv)]


def wait_listening(name, host, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            in_host(name, host, "ss", "-Htln", f"sport = :{port}"), capture_output=True, text=True
        ).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} in host {host} of {name} after {timeout}s")


@contextlib.contextmanager
def background(argv, name, host, port):
    """Runs ARGV (a server) in the background until the block ends; waits until PORT listens."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(name, host, port)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def listener(name, host, port):
    """Context manager: a plain TCP listener on all of HOST's addresses."""
    return background(in_host(name, host, PYTHON, "-c", _LISTENER, port), name, host, port)


def iperf3_server(name, host, port, mptcp=False, bind=None):
    """Context manager: an iperf3 server on all of HOST's addresses, or only on BIND."""
    cmd = ["iperf3", "-s", "-p", port]
    if bind:
        cmd += ["-B", bind]
    if mptcp:
        cmd = ["mptcpize", "run", *cmd]
    return background(in_host(name, host, *cmd), name, host, port)


def can_connect(name, host, src, dst, port, timeout=1.0):
    """True if a TCP connection from SRC (an address of HOST) to DST:PORT succeeds."""
    proc = subprocess.run(
        in_host(name, host, PYTHON, "-c", _CONNECT, dst, port, src, timeout),
        capture_output=True,
        text=True,
        timeout=timeout + 10,
    )
    return proc.returncode == 0


def iperf3_client(name, host, dst, port, src=None, seconds=3, mptcp=False):
    """Starts one iperf3 flow; returns the Popen (stdout carries the JSON report)."""
    cmd = ["iperf3", "-c", dst, "-p", port, "-t", seconds, "-J"]
    if src:
        cmd += ["-B", src]
    if mptcp:
        cmd = ["mptcpize", "run", *cmd]
    return subprocess.Popen(in_host(name, host, *cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def iperf3_mbits(proc, timeout=30):
    """Waits for an iperf3_client and returns the receiver-side throughput in Mbit/s."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"iperf3 failed rc={proc.returncode}: {err}\n{out[-2000:]}")
    report = json.loads(out)
    return report["end"]["sum_received"]["bits_per_second"] / 1e6
