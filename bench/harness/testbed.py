"""Thin wrapper over hack/testbed.sh (the rail test bed contract) plus read-only probes of the
bed's kernel state (per-rail byte counters, MPTCP counters) that the harness records as evidence
of which rails each series really used."""

import json
import subprocess
from typing import Optional, Sequence


class TestbedError(RuntimeError):
    pass


class Testbed:
    """A test bed of `hosts` namespaces x `rails` rails. Use as a context manager: the bed is
    torn down on exit whatever happened (also when it was only half built)."""

    def __init__(self, script: str, name: str, hosts: int, rails: int, rates_mbit: Sequence[int],
                 mptcp: bool = True, tcp_cc: str = ""):
        self.script, self.name, self.hosts, self.rails = script, name, hosts, rails
        self.rates_mbit, self.mptcp = list(rates_mbit), mptcp
        self.tcp_cc = tcp_cc  # "" = the machine's default (testbed.sh --tcp-cc)

    # ---- testbed.sh subcommands ----------------------------------------------------------
    def _run(self, *args: str) -> str:
        cmd = [self.script, args[0], "--name", self.name, *args[1:]]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise TestbedError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def up(self) -> None:
        # A bed left over by a killed run would make `up` refuse; it is ours (nzb prefix).
        self.down()
        args = ["up", "--hosts", str(self.hosts), "--rails", str(self.rails),
                "--rate", ",".join(str(r) for r in self.rates_mbit)]
        if self.mptcp:
            args.append("--mptcp")
        if self.tcp_cc:
            args += ["--tcp-cc", self.tcp_cc]
        self._run(*args)

    def down(self) -> None:
        self._run("down")

    def shape(self, rail: int, rate_mbit: int, host: Optional[int] = None) -> None:
        args = ["shape", "--rail", str(rail), "--rate", str(rate_mbit)]
        if host is not None:
            args += ["--host", str(host)]
        self._run(*args)
        if host is None:
            self.rates_mbit[rail] = rate_mbit

    def cut(self, host: int, rail: int) -> None:
        self._run("cut", "--host", str(host), "--rail", str(rail))

    def restore(self, host: int, rail: int) -> None:
        self._run("restore", "--host", str(host), "--rail", str(rail))

    def addr(self, host: int, rail: int) -> str:
        # Same rule as the contract (10.(100+K).0.(10+I)); asking the script keeps one source.
        return self._run("addr", "--host", str(host), "--rail", str(rail)).strip()

    def status(self) -> str:
        return self._run("status")

    def netns(self, host: int) -> str:
        return f"{self.name}-h{host}"

    def exec_argv(self, host: int, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` inside host's namespace (environment passes through)."""
        return [self.script, "exec", "--name", self.name, "--host", str(host), "--", *argv]

    # ---- evidence probes -----------------------------------------------------------------
    def rail_tx_bytes(self) -> list[list[int]]:
        """[host][rail] bytes sent so far on each rail interface (kernel counters)."""
        out = []
        for h in range(self.hosts):
            row = []
            for k in range(self.rails):
                p = subprocess.run(["ip", "-n", self.netns(h), "-s", "-j", "link", "show", f"r{k}"],
                                   capture_output=True, text=True, check=True)
                row.append(int(json.loads(p.stdout)[0]["stats64"]["tx"]["bytes"]))
            out.append(row)
        return out

    def mptcp_counters(self) -> dict[str, int]:
        """Sum over hosts of the MPTCP MIB counters that prove subflows joined."""
        names = ("MPTcpExtMPCapableSYNRX", "MPTcpExtMPJoinSynRx", "MPTcpExtMPJoinAckRx")
        total = dict.fromkeys(names, 0)
        for h in range(self.hosts):
            # -a absolute, -s do not touch nstat's history file, -z include zeros.
            p = subprocess.run(["ip", "netns", "exec", self.netns(h), "nstat", "-asz", *names],
                               capture_output=True, text=True)
            for line in p.stdout.splitlines():
                parts = line.split()
                if len(parts) >= 2 and parts[0] in total:
                    total[parts[0]] += int(parts[1])
        return total

    def __enter__(self) -> "Testbed":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()


def diff_tx(before: list[list[int]], after: list[list[int]]) -> list[int]:
    """Per-rail bytes sent by all hosts between two rail_tx_bytes() snapshots."""
    rails = len(before[0]) if before else 0
    return [sum(a[k] - b[k] for a, b in zip(after, before)) for k in range(rails)]
