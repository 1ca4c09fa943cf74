#!/usr/bin/env python3
"""Test-bed sweep the simulator is validated against (not part of make bench-sim; needs root and
the heavy lock): 2, 4 and 8 ranks on two TBF-shaped rails set low (default 200/100 Mbit/s, so
8 ranks on 2 cores stay rail-bound), Nezha adaptive and single-rail, 1 KiB .. 4 MiB.

    flock /tmp/nezha-heavy.lock /usr/bin/python3 -m bench.sim.measure [--ranks 2,4,8] [--rates 200,100]

Writes bench/results/simval-<UTC>.json (the suite's scenario format, one scenario per rank
count) and copies it to latest-simval.json, which run_des.py validates against.
"""

import argparse
import dataclasses
import datetime
import os
import shutil
import sys
import tempfile

from ..harness import hostinfo
from ..harness.config import Scenario, load_tunables
from ..harness.results import write_result
from ..harness.runner import RunContext, log, run_scenario
from ..harness.series import by_name
from ..harness.sizes import Band
from ..harness.testbed import Testbed

BANDS = (
    Band(1 << 10, 64 << 10, warmup=5, iters=20),
    Band(128 << 10, 4 << 20, warmup=3, iters=5),
)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4,8", help="rank counts (default %(default)s)")
    ap.add_argument("--rates", default="200,100", help="TBF rate per rail, Mbit/s (default %(default)s)")
    ap.add_argument("--series", default="nezha-adaptive,nezha-single")
    a = ap.parse_args(argv)
    try:
        ranks = [int(x) for x in a.ranks.split(",")]
        rates = tuple(int(x) for x in a.rates.split(","))
    except ValueError:
        ap.error("--ranks and --rates want comma-separated integers")
    if any(not 2 <= r <= 16 for r in ranks) or any(not 10 <= r <= 1000 for r in rates):
        ap.error("--ranks: 2..16 each; --rates: 10..1000 Mbit/s each")
    if os.geteuid() != 0:
        print("measure.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    tun = load_tunables()
    specs = by_name(a.series.split(","))
    started = datetime.datetime.now(datetime.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    work = tempfile.mkdtemp(prefix=f"simval-{stamp}-")
    doc = {"schema": "nezha-bench-suite/1", "mode": "simval", "started": started.isoformat(timespec="seconds"),
           "hardware": hostinfo.collect(), "rates_mbit": list(rates), "scenarios": []}
    port = 0
    for n in ranks:
        scen = Scenario(f"simval-{n}ranks", rates, n)
        with Testbed(tun.testbed_sh, tun.bed, n, len(rates), rates, mptcp=False) as bed:
            ctx = RunContext(tun=dataclasses.replace(tun, ranks=n), bed=bed, bands=list(BANDS), work_dir=work,
                             check=False, iperf=False, port=port)
            doc["scenarios"].append(run_scenario(ctx, scen, specs))
            port = ctx.port
    doc["hardware"]["loadavg_end"] = list(os.getloadavg())
    doc["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = write_result(tun.results_dir, "simval", stamp, {".json": doc})[".json"]
    shutil.rmtree(work, ignore_errors=True)
    log(f"wrote {out} and latest-simval.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
