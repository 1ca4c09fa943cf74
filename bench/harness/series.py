"""The measured series and how each one is launched: which tool, which rails, which policy. The
sweep flags are shared by nezha-bench and gloo-bench, so one builder serves both."""

import secrets
from dataclasses import dataclass

from .config import Scenario
from .sizes import Band


@dataclass(frozen=True)
class SeriesSpec:
    name: str
    label: str  # legend text
    tool: str  # "nezha" | "gloo"
    policy: str = ""  # NEZHA_POLICY for nezha-bench
    mptcp: bool = False  # run under `mptcpize run` (the bed has MPTCP endpoints on every rail)
    # gloo-bench on every rail at fixed shares, several launches, best split per size
    # (harness.hand_split); only on scenarios with >= 2 rails and at >= 16 MiB.
    hand_split: bool = False
    # NEZHA_TCP_CONGESTION for nezha-bench; "" = the runtime's default (auto). The cc series
    # compare the runtime's choice with the host's default on the same bed, in the same run.
    tcp_congestion: str = ""
    # NEZHA_STREAMS_PER_PEER for nezha-bench; 0 = the runtime's default. The stream series
    # compare one TCP connection per peer and rail with the default, in the same run.
    streams_per_peer: int = 0


SERIES = (
    SeriesSpec("nezha-adaptive", "Nezha adaptive", "nezha", policy="adaptive"),
    SeriesSpec("nezha-single", "Nezha single (best rail)", "nezha", policy="single"),
    SeriesSpec("nezha-static", "Nezha static (bandwidth-proportional)", "nezha", policy="static"),
    SeriesSpec("gloo-best-rail", "Gloo ring, best rail", "gloo"),
    SeriesSpec("gloo-mptcp", "Gloo ring over MPTCP (all rails)", "gloo", mptcp=True),
    SeriesSpec("gloo-hand-split", "Gloo ring, hand split at the best static ratio", "gloo", hand_split=True),
    SeriesSpec("nezha-adaptive-hostcc", "Nezha adaptive, host's congestion control", "nezha",
               policy="adaptive", tcp_congestion="host"),
    SeriesSpec("nezha-adaptive-cubic", "Nezha adaptive, cubic", "nezha", policy="adaptive",
               tcp_congestion="cubic"),
    SeriesSpec("nezha-adaptive-1stream", "Nezha adaptive, one stream per peer", "nezha",
               policy="adaptive", streams_per_peer=1),
    SeriesSpec("nezha-single-1stream", "Nezha single, one stream per peer", "nezha",
               policy="single", streams_per_peer=1),
)
# Series a plain run leaves out: the congestion-control comparison (--series, make bench-cc)
# and the streams-per-peer comparison (--series).
OPT_IN_SERIES = ("nezha-adaptive-hostcc", "nezha-adaptive-cubic", "nezha-adaptive-1stream",
                 "nezha-single-1stream")
THEORETICAL = (
    ("ceiling", "sum-of-rails ceiling (TBF rates)"),
    ("ceiling-iperf", "sum-of-rails ceiling (iperf3-measured)"),
)
SERIES_ORDER = tuple(s.name for s in SERIES) + tuple(n for n, _ in THEORETICAL)
LABELS = {**{s.name: s.label for s in SERIES}, **dict(THEORETICAL)}


def by_name(names: list[str]) -> list[SeriesSpec]:
    known = {s.name: s for s in SERIES}
    for n in names:
        if n not in known:
            raise ValueError(f"--series: unknown series {n!r} (want one of {', '.join(known)})")
    return [s for s in SERIES if s.name in names]


# Up to this size every series gets the adaptive policy's warmup too: it is cheap there, and small
# ops are sensitive to warm caches and TCP windows, so equal warmup keeps the latency comparison
# fair. Above it only the adaptive policy needs the extra ops (to learn its split).
EQUAL_WARMUP_MAX_BYTES = 4 << 20


def warmup_for(spec: SeriesSpec, band: Band, adaptive_warmup: int) -> int:
    if spec.policy == "adaptive" or band.max_bytes <= EQUAL_WARMUP_MAX_BYTES:
        return max(band.warmup, adaptive_warmup)
    return band.warmup


def sweep_args(band: Band, warmup: int, json_path: str, check: bool) -> list[str]:
    args = ["--op", "allreduce", "--dtype", "float32", "--min-bytes", str(band.min_bytes),
            "--max-bytes", str(band.max_bytes), "--factor", "2", "--warmup", str(warmup),
            "--iters", str(band.iters), "--json", json_path]
    return args + (["--check"] if check else [])


def paired_args(spec: SeriesSpec, band: Band) -> list[str]:
    """The adaptive series runs the band's paired policy in the same launch (Band.paired), and
    that policy's series runs adaptive as its pair: the reverse launch. nezha-bench's first
    communicator runs 5-9 % slower at 4-32 KiB than its second whatever the policies (single
    paired with single showed it), so the latency ratio is the geometric mean of both launches'
    ratios, in which that bias cancels (ratios.PAIRED_SINGLE)."""
    if not band.paired or spec.tool != "nezha":
        return []
    if spec.policy == "adaptive":
        return ["--paired-policy", band.paired]
    if spec.policy == band.paired:
        return ["--paired-policy", "adaptive"]
    return []


@dataclass
class Launch:
    """Everything that differs per rank for one invocation of a series on one band."""

    spec: SeriesSpec
    scenario: Scenario
    world: int
    rails: int
    argv_common: list[str]  # tool + sweep flags
    store_dir: str = ""  # gloo FileStore
    rendezvous: str = ""  # nezha host:port
    token: str = ""
    split: tuple[float, ...] = ()  # hand split: each rail's share, rail r0 first

    def argv(self, rank: int) -> list[str]:
        if self.spec.tool == "nezha":
            return list(self.argv_common)
        if self.spec.hand_split:
            if len(self.split) != self.rails:
                raise ValueError(f"{self.spec.name}: want one share per rail ({self.rails}), got {self.split}")
            return [*self.argv_common, "--rank", str(rank), "--world-size", str(self.world),
                    "--iface", ",".join(f"r{k}" for k in range(self.rails)),
                    "--split", ",".join(f"{s:.3f}" for s in self.split), "--store-dir", self.store_dir]
        best = self.scenario.best_rail()
        rail_name = f"mptcp(r{best}+)" if self.spec.mptcp else f"r{best}"
        argv = [*self.argv_common, "--rank", str(rank), "--world-size", str(self.world),
                "--iface", f"r{best}", "--rail-name", rail_name, "--store-dir", self.store_dir]
        return ["mptcpize", "run", *argv] if self.spec.mptcp else argv

    def env(self, rank: int) -> dict:
        if self.spec.tool != "nezha":
            return {}
        return {
            "NEZHA_RAILS": ",".join(f"r{k}=r{k}:tcp" for k in range(self.rails)),
            "NEZHA_RANK": str(rank),
            "NEZHA_WORLD_SIZE": str(self.world),
            "NEZHA_RENDEZVOUS": self.rendezvous,
            "NEZHA_JOB_TOKEN": self.token,
            "NEZHA_POLICY": self.spec.policy,
            **({"NEZHA_TCP_CONGESTION": self.spec.tcp_congestion} if self.spec.tcp_congestion else {}),
            **({"NEZHA_STREAMS_PER_PEER": str(self.spec.streams_per_peer)} if self.spec.streams_per_peer else {}),
        }


def make_launch(spec: SeriesSpec, scenario: Scenario, world: int, tool_path: str, band: Band,
                warmup: int, json_path: str, check: bool, store_dir: str, rendezvous: str,
                split: tuple[float, ...] = ()) -> Launch:
    return Launch(spec=spec, scenario=scenario, world=world, rails=len(scenario.rates_mbit),
                  argv_common=[tool_path, *sweep_args(band, warmup, json_path, check), *paired_args(spec, band)],
                  store_dir=store_dir, rendezvous=rendezvous, token=secrets.token_hex(32), split=split)
