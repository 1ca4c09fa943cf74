#!/usr/bin/env python3
"""Checks libnezha's layering: every #include under runtime/src against the rooms table.

The table is the one in runtime/src/README.md (the design's own statement of who may include
whom), read from its "may include" column, so the rule and its documentation cannot drift apart.
A file may include its own room, the public headers (nezha/...), system and third-party headers
(<...>), and the rooms named in its row. Anything else is reported as FILE:LINE with the room it
reached; the exit status is 1 when there is any, 2 when the table or a file cannot be read.

Usage: check_layers.py [--src DIR] [--readme FILE]
"""

import argparse
import os
import re
import sys

PUBLIC_PREFIX = "nezha"
ROW = re.compile(r"^\|\s*`([a-z_]+)/`\s*\|.*\|(?P<may>[^|]*)\|\s*$")
ROOM_REF = re.compile(r"`([a-z_]+)/`")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


class TableError(Exception):
    pass


def read_table(readme_path):
    """Returns {room: set(rooms it may include)} from the README's rooms table."""
    try:
        with open(readme_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise TableError(f"{readme_path}: cannot read the rooms table: {e.strerror}") from e
    table = {}
    for number, line in enumerate(lines, 1):
        m = ROW.match(line)
        if not m:
            continue
        room = m.group(1)
        if room in table:
            raise TableError(f"{readme_path}:{number}: room '{room}/' appears twice in the table")
        table[room] = set(ROOM_REF.findall(m.group("may")))
    if not table:
        raise TableError(f"{readme_path}: no rooms table (rows like | `room/` | ... | `other/` |)")
    for room, allowed in table.items():
        unknown = sorted(allowed - table.keys())
        if unknown:
            raise TableError(
                f"{readme_path}: room '{room}/' may include {', '.join(u + '/' for u in unknown)}, "
                "which the table does not list as a room"
            )
    return table


def violations(src_dir, table):
    """Yields (path, line number, include, message) for every include against the table."""
    for dirpath, dirnames, filenames in os.walk(src_dir):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith((".h", ".cc", ".hpp", ".cpp", ".c")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src_dir)
            room = rel.split(os.sep)[0]
            if room == rel:  # a file directly under src/ belongs to no room
                yield rel, 0, "", "file outside every room (put it in one of the table's rooms)"
                continue
            if room not in table:
                yield rel, 0, "", f"room '{room}/' is not in the rooms table"
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    target_room = target.split("/")[0] if "/" in target else room
                    if target_room in (room, PUBLIC_PREFIX) or target_room in table[room]:
                        continue
                    if target_room not in table:
                        why = f"'{target_room}/' is not a room"
                    else:
                        why = f"room '{room}/' may not include '{target_room}/'"
                    yield rel, number, target, why


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default_src = os.path.normpath(os.path.join(here, "..", "src"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=default_src, help="runtime/src (default: %(default)s)")
    parser.add_argument("--readme", help="the rooms table (default: SRC/README.md)")
    args = parser.parse_args(argv)
    readme = args.readme or os.path.join(args.src, "README.md")
    try:
        table = read_table(readme)
    except TableError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    found = list(violations(args.src, table))
    for rel, number, target, why in found:
        where = f"runtime/src/{rel}:{number}" if number else f"runtime/src/{rel}"
        inc = f' #include "{target}":' if target else ":"
        print(f"{where}:{inc} {why}", file=sys.stderr)
    if found:
        print(f"check_layers: {len(found)} include(s) against {readme}'s table", file=sys.stderr)
        return 1
    print(f"check_layers: {len(table)} rooms, every include follows the table")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
