"""Reading the tools' JSON documents and merging the per-band invocations of one series into one
document. Both nezha-bench and gloo-bench write the same shape (see bench/README.md)."""

REQUIRED_TOP = ("tool", "op", "dtype", "world_size", "rails", "results")
REQUIRED_ROW = ("bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "check")
# Fields that must agree between the band documents of one series.
SAME_ACROSS_BANDS = ("tool", "op", "dtype", "world_size", "policy")


def validate_tool_doc(doc, source: str) -> None:
    """Raise ValueError naming `source` and the field when a tool document is malformed."""
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: want a JSON object, got {type(doc).__name__}")
    for key in REQUIRED_TOP:
        if key not in doc:
            raise ValueError(f"{source}: missing field {key!r}")
    if not isinstance(doc["results"], list):
        raise ValueError(f"{source}: field 'results' must be a list")
    if not isinstance(doc["world_size"], int) or doc["world_size"] < 1:
        raise ValueError(f"{source}: field 'world_size' must be a positive integer, got {doc['world_size']!r}")
    for i, row in enumerate(doc["results"]):
        if not isinstance(row, dict):
            raise ValueError(f"{source}: results[{i}] must be an object")
        for key in REQUIRED_ROW:
            if key not in row:
                raise ValueError(f"{source}: results[{i}] missing field {key!r}")
        if not isinstance(row["bytes"], int) or row["bytes"] <= 0:
            raise ValueError(f"{source}: results[{i}].bytes must be a positive integer, got {row['bytes']!r}")
        for key in ("time_us", "algbw_gbps"):
            v = row[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{source}: results[{i}].{key} must be a number >= 0, got {v!r}")
        if "paired" in row:
            p = row["paired"]
            v = p.get("time_us") if isinstance(p, dict) else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{source}: results[{i}].paired.time_us must be a number >= 0, got {v!r}")
        # Per-op statistics (nezha-bench) are optional; present, they must be numbers.
        for where, fields in ((row, f"results[{i}]"), (row.get("paired"), f"results[{i}].paired")):
            for key in ("op_trimmed_us", "op_p50_us", "op_p99_us", "op_max_us"):
                if isinstance(where, dict) and key in where:
                    v = where[key]
                    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                        raise ValueError(f"{source}: {fields}.{key} must be a number >= 0, got {v!r}")


# The statistics a paired speedup is taken of, and the merged row's field for each: the trimmed
# mean (judged; nezha-bench kTrimmedShare says why) and the plain mean (reported next to it).
PAIRED_STATS = (("op_trimmed_us", "paired_speedup"), ("time_us", "paired_speedup_mean"))


def paired_speedup(row: dict, stat: str = "op_trimmed_us"):
    """The paired policy's time over this row's own (nezha-bench --paired-policy, one launch),
    by `stat`: > 1 when this series was faster. None without a paired measurement of it."""
    p = row.get("paired")
    if not isinstance(p, dict) or not row.get(stat) or not p.get(stat):
        return None
    return p[stat] / row[stat]


def merge_band_docs(docs: list[tuple[str, dict]]) -> dict:
    """Merge [(source, doc), ...] of one series into one document with rows sorted by size.

    Every doc is validated; the docs must agree on tool/op/dtype/world_size/policy and must not
    measure the same size twice (that would mean overlapping bands, a harness bug)."""
    if not docs:
        raise ValueError("merge_band_docs: no documents")
    for source, doc in docs:
        validate_tool_doc(doc, source)
    first_source, first = docs[0]
    merged = {k: v for k, v in first.items() if k != "results"}
    seen: dict[int, str] = {}
    rows = []
    for source, doc in docs:
        for key in SAME_ACROSS_BANDS:
            if doc.get(key) != first.get(key):
                raise ValueError(
                    f"{source}: field {key!r} is {doc.get(key)!r} but {first_source} has {first.get(key)!r}")
        for row in doc["results"]:
            if row["bytes"] in seen:
                raise ValueError(f"{source}: size {row['bytes']} already measured in {seen[row['bytes']]}")
            seen[row["bytes"]] = source
            rows.append(row)
    merged["results"] = sorted(rows, key=lambda r: r["bytes"])
    return merged


def median_of_repeats(docs: list[tuple[str, dict]]) -> tuple[str, dict]:
    """Combine repeated launches of one band: per size, the row of median time (lower middle for
    an even count). A size whose check failed in any repeat stays failed. Returns (source, doc)."""
    if not docs:
        raise ValueError("median_of_repeats: no documents")
    for source, doc in docs:
        validate_tool_doc(doc, source)
    if len(docs) == 1:
        return docs[0]
    first_source, first = docs[0]
    rows_by_size: dict[int, list[dict]] = {}
    for source, doc in docs:
        sizes = [r["bytes"] for r in doc["results"]]
        if sizes != [r["bytes"] for r in first["results"]]:
            raise ValueError(f"{source}: sizes {sizes} differ from the repeat {first_source}")
        for r in doc["results"]:
            rows_by_size.setdefault(r["bytes"], []).append(r)
    rows = []
    for b in sorted(rows_by_size):
        reps = sorted(rows_by_size[b], key=lambda r: r["time_us"])
        row = dict(reps[(len(reps) - 1) // 2])
        row["repeats_time_us"] = [r["time_us"] for r in rows_by_size[b]]
        for stat, field in PAIRED_STATS:
            speedups = [paired_speedup(r, stat) for r in rows_by_size[b]]
            if all(x is not None for x in speedups):
                # Each launch's own side-by-side ratio, then their median (not the ratio of the
                # median launches: those may be different launches on each side).
                row["repeats_" + field] = speedups
                row[field] = sorted(speedups)[(len(speedups) - 1) // 2]
        if any(r["check"] == "failed" for r in reps):
            row["check"] = "failed"
        rows.append(row)
    sources = "+".join(src for src, _ in docs)
    return sources, {**first, "results": rows}


def constant_series(sizes: list[int], algbw_gbps: float, world_size: int) -> list[dict]:
    """Rows of a theoretical series (the ceiling) in the tools' row shape, for uniform handling."""
    from .ceiling import ring_allreduce_bus_factor

    rows = []
    for b in sizes:
        time_us = b / (algbw_gbps * 1e3) if algbw_gbps > 0 else None
        rows.append({"bytes": b, "count": None, "time_us": time_us, "algbw_gbps": algbw_gbps,
                     "busbw_gbps": algbw_gbps * ring_allreduce_bus_factor(world_size),
                     "check": "theoretical"})
    return rows
