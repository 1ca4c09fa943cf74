"""The one way a benchmark driver writes its result (bench/README.md, "Outputs"): every file of a
run is <kind>-<stamp><suffix> under the results directory, and a copy of it is latest-<kind><suffix>
(latest<suffix> for the suite itself, kind "bench"). Only the latest-* copies and the named
baselines are committed; the stamped files stay local (.gitignore), so a run never leaves a
reviewer 20 new files to judge."""
import json
import os
import shutil

SUITE_KIND = "bench"
# Where a driver writes unless told otherwise (--out, NEZHA_BENCH_RESULTS for the suite).
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def latest_name(kind: str, suffix: str) -> str:
    """The committed copy's file name: latest.json for the suite, latest-nccl.txt for kind nccl."""
    return f"latest{suffix}" if kind == SUITE_KIND else f"latest-{kind}{suffix}"


def _write(path: str, content) -> None:
    """A dict or list is JSON, a str is text, a callable writes the path itself (a plot).
    JSON and text land under a temporary name first, so a reader never sees half a file."""
    if callable(content):
        content(path)
        return
    if isinstance(content, (dict, list)):
        text = json.dumps(content, indent=1) + "\n"
    elif isinstance(content, str):
        text = content
    else:
        raise TypeError(f"{path}: content must be a dict, list, str or a callable that writes the file, "
                        f"got {type(content).__name__}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def figure_writer(fig, dpi: int = 110):
    """A matplotlib figure as write_result content: laid out, saved in the path's format, then
    closed (pyplot keeps every open figure alive)."""
    def write(path: str) -> None:
        from matplotlib import pyplot  # only plotting callers pay for the import

        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
        pyplot.close(fig)
    return write


def write_result(results_dir: str, kind: str, stamp: str, files: dict, latest: bool = True) -> dict:
    """Write one run's files: suffix (".json", ".txt", "-algo.json", "-gain.png") -> content (see
    _write). Each becomes <kind>-<stamp><suffix> and, unless latest is False, is copied to
    latest_name(kind, suffix). Returns {suffix: stamped path}."""
    if not kind or "/" in kind:
        raise ValueError(f"kind must be a plain name, got {kind!r}")
    os.makedirs(results_dir, exist_ok=True)
    paths = {}
    for suffix, content in files.items():
        path = os.path.join(results_dir, f"{kind}-{stamp}{suffix}")
        _write(path, content)
        paths[suffix] = path
    if latest:
        for suffix, path in paths.items():
            shutil.copyfile(path, os.path.join(results_dir, latest_name(kind, suffix)))
    return paths
