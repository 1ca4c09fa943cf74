"""The host-default targets side by side: one table, goal | target | one column per pass (the
machine's default congestion control, then reno), each cell the measured value and PASS/MISS,
followed by what every run of each pass ran on (congestion control, load average) and the CPU
profile of the unshaped runs. Text for the terminal and results/latest-targets.txt, Markdown for
bench/README.md's generated block."""

from typing import Optional

from .cpu_profile import summary_line
from .readme_block import rewrite_block
from .sizes import format_bytes
from .tables import format_table
from .targets import SOURCES, TARGETS, judge_pass, source_info

README_BLOCK = "bench-targets"
GENERATOR = "bench/run_targets.py from results/latest-targets.json"
# What a pass's congestion control does and does not govern (runtime/README.md): the bed's
# hosts run it, so Gloo's sockets do; Nezha's rail sockets pick their own unless told not to.
CC_NOTE = ("each pass sets the congestion control of the bed's hosts: Gloo's sockets run it; Nezha's rail "
           "sockets run the runtime's choice (NEZHA_TCP_CONGESTION=auto: reno where the namespace may "
           "use it) on both")


def build(passes: list[dict]) -> dict:
    """passes: [{"label", "cc", "docs": {source: doc|None}, "files": {source: path}, "note"?}].
    Returns the result document: every pass's cells and source info, and the unshaped profiles."""
    out = []
    for p in passes:
        docs = p["docs"]
        entry = {"label": p["label"], "cc": p["cc"], "cells": judge_pass(docs),
                 "sources": [dict(source_info(s, docs.get(s)), file=p.get("files", {}).get(s)) for s in SOURCES]}
        prof = (docs.get("unshaped") or {}).get("profile")
        if prof:
            entry["profile"] = prof
        if p.get("note"):
            entry["note"] = p["note"]
        out.append(entry)
    return {"schema": "nezha-bench-targets/1", "targets": [t.__dict__ for t in TARGETS], "passes": out}


def _head(p: dict) -> str:
    return p["cc"] if p["label"] == p["cc"] else f"{p['label']} ({p['cc']})"


def _rows(doc: dict) -> list[list[str]]:
    rows = []
    for t in doc["targets"]:
        cells = []
        for p in doc["passes"]:
            c = p["cells"][t["id"]]
            cells.append(f"{c['value']} {c['status']}".strip() if c["value"] else c["status"])
        rows.append([t["text"], t["target"], *cells])
    return rows


def _load(x: Optional[list]) -> str:
    return "n/a" if not x else ", ".join(f"{v:.2f}" for v in x)


def _source_lines(doc: dict) -> list[str]:
    lines = []
    for p in doc["passes"]:
        for s in p["sources"]:
            where = f"{_head(p)}, {s['source']}"
            if not s["ran"]:
                lines.append(f"{where}: not run")
                continue
            lines.append(f"{where}: started {s['started']}, bed's congestion control {s['tcp_congestion_control']}, "
                         f"load average {_load(s['loadavg_start'])} at start, {_load(s['loadavg_end'])} at end"
                         + (f" ({s['file']})" if s.get("file") else ""))
    return lines


def _profile_lines(doc: dict) -> list[str]:
    lines = []
    for p in doc["passes"]:
        prof = p.get("profile")
        if not prof:
            continue
        lines.append(f"{_head(p)}: where rank 0's cycles go on unshaped rails at {format_bytes(prof['size'])} "
                     "(perf record, self time, % of the process's samples):")
        lines += [f"  {summary_line(name, sp)}" for name, sp in prof["series"].items()]
    return lines


def text(doc: dict) -> str:
    heads = ["goal", "target", *(_head(p) for p in doc["passes"])]
    out = [f"Targets on the host default and on reno, started {doc.get('started', 'n/a')}"
           + (f", {doc['duration_s'] / 60:.1f} min" if "duration_s" in doc else ""),
           format_table(heads, _rows(doc), align="l" * len(heads)), "", f"note: {CC_NOTE}"]
    out += [f"note ({_head(p)}): {p['note']}" for p in doc["passes"] if p.get("note")]
    out += ["", "runs (the congestion control and load average of each):", *_source_lines(doc)]
    prof = _profile_lines(doc)
    if prof:
        out += ["", *prof]
    return "\n".join(out) + "\n"


def markdown(doc: dict) -> str:
    heads = ["goal", "target", *(_head(p) for p in doc["passes"])]
    lines = [f"Run started {doc.get('started', 'n/a')}"
             + (f", {doc['duration_s'] / 60:.1f} min" if "duration_s" in doc else "") + f"; {CC_NOTE}.", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(doc)]
    lines += [""] + [f"- {line}" for line in _source_lines(doc)]
    lines += [f"- note ({_head(p)}): {p['note']}" for p in doc["passes"] if p.get("note")]
    prof = _profile_lines(doc)
    if prof:
        lines += [""] + [line if not line.startswith("  ") else f"  - {line.strip()}" for line in prof]
    return "\n".join(lines)


def update_readme(path: str, doc: dict) -> None:
    rewrite_block(path, README_BLOCK, GENERATOR, markdown(doc))
