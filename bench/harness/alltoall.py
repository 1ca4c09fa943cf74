"""Alltoall: the new data path vs the allgather-composed one, from nezha-bench's own side-by-side
rows (`nezha-bench --op alltoall --vs-composed`: both paths timed at every size in the same run,
same rails). Pure functions: rows out of the results JSON, verdicts, the text table."""

from .sizes import format_bytes

# Our own criteria (the suite's goals give no alltoall number): never slower than the old path
# beyond noise, and at the largest size at least half of the byte ratio (the composed path moves
# n x the bytes, so on bandwidth-bound rails the ideal speedup is about n).
NO_REGRESSION = 0.95


def rows(results: dict) -> list[dict]:
    """[{bytes, new_us, composed_us, speedup, check, hot}] from a nezha-bench --json file."""
    out = []
    for r in results["results"]:
        if "composed_time_us" not in r:
            raise ValueError(f"size {r['bytes']}: no composed_time_us (run nezha-bench with --vs-composed)")
        out.append({"bytes": r["bytes"], "new_us": r["time_us"], "composed_us": r["composed_time_us"],
                    "speedup": r["composed_time_us"] / r["time_us"], "check": r["check"], "hot": r["hot"]})
    return out


def verdicts(world: int, rs: list[dict]) -> list[tuple[str, str, str]]:
    """(name, PASS|MISS, detail) per criterion for one world size."""
    if not rs:
        return [("measured", "MISS", "no sizes")]
    worst = min(rs, key=lambda r: r["speedup"])
    largest = max(rs, key=lambda r: r["bytes"])
    want = world / 2
    bad = [r for r in rs if r["check"] != "ok"]
    return [
        ("exact", "MISS" if bad else "PASS",
         f"{len(bad)} size(s) with a wrong result" if bad else "every size checked on every rank"),
        ("no regression", "PASS" if worst["speedup"] >= NO_REGRESSION else "MISS",
         f"worst {worst['speedup']:.2f}x at {format_bytes(worst['bytes'])} (want >= {NO_REGRESSION})"),
        ("large messages", "PASS" if largest["speedup"] >= want else "MISS",
         f"{largest['speedup']:.2f}x at {format_bytes(largest['bytes'])} (want >= n/2 = {want:g})"),
    ]


def table(world: int, rs: list[dict]) -> str:
    lines = [f"{world} ranks: alltoall (new) vs allgather-composed alltoallv (old), same run",
             f"{'size':>8} {'new us':>11} {'composed us':>12} {'speedup':>8} {'split':>6} {'check':>6}"]
    for r in rs:
        lines.append(f"{format_bytes(r['bytes']):>8} {r['new_us']:>11.1f} {r['composed_us']:>12.1f} "
                     f"{r['speedup']:>7.2f}x {'hot' if r['hot'] else 'cold':>6} {r['check']:>6}")
    return "\n".join(lines)


def tune_section(lines: list[str]) -> list[str]:
    """The alltoall block of nezha-tune --algorithms output (header line to the next '#')."""
    out, inside = [], False
    for ln in lines:
        if ln.startswith("# alltoall,"):
            inside = True
            continue
        if inside and ln.startswith("#"):
            break
        if inside:
            out.append(ln)
    return out
