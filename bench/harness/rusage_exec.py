#!/usr/bin/python3
"""rusage_exec.py OUT.json -- CMD ARGS...: run CMD, then write the CPU time it used (user and
system seconds of CMD and everything it waited for: RUSAGE_CHILDREN after the wait) to OUT.json
and exit with CMD's status. The bench harness runs each rank under it inside the bed's namespace,
so a rank's CPU is its own, not the launcher's (this script's own start-up is not counted)."""

import json
import os
import resource
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: rusage_exec.py OUT.json -- CMD ARGS...", file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    rc = subprocess.call(cmd)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"rc": rc, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                   "max_rss_kib": ru.ru_maxrss, "vol_ctx_switches": ru.ru_nvcsw,
                   "invol_ctx_switches": ru.ru_nivcsw}, f)
    os.replace(tmp, out)
    # A signal death is reported the way a shell would (128 + signal), not as a negative code.
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
