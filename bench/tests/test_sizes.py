import pytest

from bench.harness.sizes import Band, clip_bands, format_bytes, parse_bytes, sweep


@pytest.mark.parametrize("text,want", [("4096", 4096), ("1K", 1024), ("1k", 1024), ("256M", 256 << 20),
                                       ("1G", 1 << 30), ("0", 0)])
def test_parse_bytes(text, want):
    assert parse_bytes("--max-bytes", text) == want


@pytest.mark.parametrize("text", ["", "K", "1X", "1.5M", "-1", "1KB", " "])
def test_parse_bytes_rejects_and_names_flag(text):
    with pytest.raises(ValueError, match="--max-bytes"):
        parse_bytes("--max-bytes", text)


@pytest.mark.parametrize("n,want", [(1024, "1K"), (256 << 20, "256M"), (1 << 30, "1G"), (1000, "1000"),
                                    (1536, "1536"), (3 << 20, "3M")])
def test_format_bytes(n, want):
    assert format_bytes(n) == want


def test_sweep_full_range_has_19_sizes():
    s = sweep(1024, 256 << 20)
    assert len(s) == 19 and s[0] == 1024 and s[-1] == 256 << 20


def test_sweep_stops_below_max_when_off_grid():
    assert sweep(1000, 5000, 2) == [1000, 2000, 4000]


@pytest.mark.parametrize("args", [(0, 10, 2), (10, 5, 2), (1, 10, 1)])
def test_sweep_rejects(args):
    with pytest.raises(ValueError):
        sweep(*args)


def test_clip_bands_keeps_grid_and_drops_empty():
    bands = [Band(1 << 10, 64 << 10, 5, 30), Band(128 << 10, 4 << 20, 3, 10), Band(8 << 20, 256 << 20, 1, 3)]
    got = clip_bands(bands, 3000, 16 << 20)
    assert got == [Band(4096, 64 << 10, 5, 30), Band(128 << 10, 4 << 20, 3, 10), Band(8 << 20, 16 << 20, 1, 3)]
    assert clip_bands(bands, 300 << 20, 400 << 20) == []
    assert [b.label() for b in got] == ["4K-64K", "128K-4M", "8M-16M"]
