"""The one result writer (bench/harness/results.py): stamped files, latest copies, bad content."""
import json

import pytest

from bench.harness.results import figure_writer, latest_name, write_result


def test_latest_names_keep_the_suite_plain_and_prefix_every_other_kind():
    assert latest_name("bench", ".json") == "latest.json"
    assert latest_name("nccl", ".txt") == "latest-nccl.txt"
    assert latest_name("alltoall", "-algo.json") == "latest-alltoall-algo.json"


def test_write_result_writes_stamped_files_and_latest_copies(tmp_path):
    out = tmp_path / "new" / "dir"  # created on demand
    drawn = []

    def draw(path):
        drawn.append(path)
        with open(path, "wb") as f:
            f.write(b"png")

    paths = write_result(str(out), "split-curve", "20260101T000000Z",
                         {".json": {"verdict": "PASS"}, ".txt": "PASS\n", ".png": draw})
    assert paths == {s: str(out / f"split-curve-20260101T000000Z{s}") for s in (".json", ".txt", ".png")}
    assert json.loads((out / "latest-split-curve.json").read_text()) == {"verdict": "PASS"}
    assert (out / "latest-split-curve.txt").read_text() == "PASS\n"
    assert (out / "latest-split-curve.png").read_bytes() == b"png"
    assert drawn == [paths[".png"]]  # a plot is drawn once, straight to its stamped name
    assert not list(out.glob("*.tmp"))


def test_write_result_without_latest_leaves_the_committed_copies_alone(tmp_path):
    (tmp_path / "latest-nccl.json").write_text("{}\n")
    write_result(str(tmp_path), "nccl", "20260101T000000Z", {".json": {"a": 1}}, latest=False)
    assert (tmp_path / "latest-nccl.json").read_text() == "{}\n"
    assert json.loads((tmp_path / "nccl-20260101T000000Z.json").read_text()) == {"a": 1}


@pytest.mark.parametrize("kind", ["", "a/b"])
def test_write_result_refuses_a_kind_that_is_not_a_plain_name(tmp_path, kind):
    with pytest.raises(ValueError, match="kind must be a plain name"):
        write_result(str(tmp_path), kind, "s", {".json": {}})


def test_write_result_names_the_file_whose_content_it_cannot_write(tmp_path):
    with pytest.raises(TypeError, match=r"ddp-s\.json: content must be .* got int"):
        write_result(str(tmp_path), "ddp", "s", {".json": 3})


def test_figure_writer_saves_a_png_and_closes_the_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    fig, ax = pyplot.subplots()
    ax.plot([1, 2], [3, 4])
    write_result(str(tmp_path), "sim", "s", {"-gain.png": figure_writer(fig)})
    assert (tmp_path / "latest-sim-gain.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not pyplot.fignum_exists(fig.number)
