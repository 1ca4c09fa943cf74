#!/usr/bin/python3
"""Sample one rank's runtime metrics (GET /metrics on its control port) twice a second for the
demo (hack/demo.sh): per rail the bytes it carried and its state, and the operations run.

    demo-sample.py URL OUT.jsonl

Appends one JSON line per sample ({"t", "ops", "bytes": {rail: n}, "state": {rail: s},
"rejected"/"readmitted": {rail: {reason: n}}) until
it is killed; a failed fetch (the worker finished or restarts) is skipped."""

import json
import re
import sys
import time
import urllib.request

PERIOD_SECONDS = 0.5
SAMPLE = re.compile(r'^(nezha_runtime_[a-z_]+)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """The samples the demo plots, from Prometheus text."""
    out = {"ops": None, "bytes": {}, "state": {}, "rejected": {}, "readmitted": {}}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))
        if name == "nezha_runtime_operations_total":
            out["ops"] = value
        elif name == "nezha_runtime_rail_bytes_total" and "rail" in labels:
            out["bytes"][labels["rail"]] = value
        elif name == "nezha_runtime_rail_state" and value == 1 and "rail" in labels:
            out["state"][labels["rail"]] = labels.get("state", "")
        elif name in ("nezha_runtime_readmission_rejections_total", "nezha_runtime_readmissions_total") \
                and labels.get("reason"):
            key = "rejected" if "rejections" in name else "readmitted"
            # rail -> {reason: count}
            out[key].setdefault(labels.get("rail", ""), {})[labels["reason"]] = value
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, path = argv[1], argv[2]
    with open(path, "a", encoding="utf-8") as f:
        while True:
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    text = resp.read().decode("utf-8", "replace")
                sample = parse(text)
                if sample["ops"] is not None:
                    sample["t"] = time.time()
                    f.write(json.dumps(sample) + "\n")
                    f.flush()
            except (OSError, ValueError):
                pass
            time.sleep(max(0.0, PERIOD_SECONDS - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
