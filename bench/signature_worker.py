"""One rank of the signature-cost benchmark (started by bench/run_signature_cost.py in a test-bed
namespace with the pinned torch venv's python): allreduce through two nezha process groups of
the same ranks and rails in one launch, one comparing every operation's signature across ranks
before it runs (the default), one with the check off (NEZHA_TORCH_SIGNATURES=off when it was
created). Blocks of BLOCK operations alternate between them, so both see the same background
load (the suite's --paired-policy comparison, bench/README.md).

  signature_worker.py SIZES_BYTES(comma) SMALL_ITERS LARGE_ITERS [checked|unchecked]

The last argument says which group is created first, the default group (default: checked).
A process's first communicator runs a few per cent slower at 4-32 KiB than its second whatever
either does (bench/README.md, "Latency, side by side"), so run_signature_cost.py runs both
orders and takes the geometric mean of their ratios, in which that factor cancels.

Prints one `REPORT {json}` line: per size, each side's op times in seconds."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import nezha.torch

BLOCK = 5
LARGE = 1 << 20  # from here on LARGE_ITERS per side


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")]
    small_iters, large_iters = int(sys.argv[2]), int(sys.argv[3])
    first = sys.argv[4] if len(sys.argv) > 4 else "checked"
    if first not in ("checked", "unchecked"):
        raise SystemExit(f"signature_worker.py: first group {first!r} (want checked or unchecked)")
    torch.set_num_threads(1)

    def make_group(check: bool, default: bool):
        if not check:
            os.environ[nezha.torch.SIGNATURES_ENV] = "off"
        try:
            if default:
                dist.init_process_group("nezha", init_method="env://", rank=int(os.environ["RANK"]),
                                        world_size=int(os.environ["WORLD_SIZE"]),
                                        timeout=timedelta(seconds=120))
                return dist.distributed_c10d._get_default_group()
            return dist.new_group(backend="nezha")
        finally:
            os.environ.pop(nezha.torch.SIGNATURES_ENV, None)

    checked_first = first == "checked"
    groups = {checked_first: make_group(checked_first, True)}
    groups[not checked_first] = make_group(not checked_first, False)
    checked, unchecked = groups[True], groups[False]
    rows = {}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        iters = large_iters if nbytes >= LARGE else small_iters
        times = {"on": [], "off": []}
        for g in (checked, unchecked):  # warm-up: the adaptive policy learns the size first
            for _ in range(10):
                dist.all_reduce(t, group=g)
        for block in range(2 * iters // BLOCK):
            side = "on" if block % 2 == 0 else "off"
            g = checked if side == "on" else unchecked
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                dist.all_reduce(t, group=g)
                times[side].append(time.perf_counter() - t0)
        rows[str(nbytes)] = times
    print("REPORT " + json.dumps({"rows": rows}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
