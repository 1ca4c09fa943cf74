import pytest

from bench.harness.merge import constant_series, merge_band_docs, validate_tool_doc


def row(b, algbw=0.05, check="ok"):
    return {"bytes": b, "count": b // 4, "time_us": b / (algbw * 1e3), "algbw_gbps": algbw,
            "busbw_gbps": algbw * 1.5, "check": check, "split": {"r0": 1}, "rail_bytes": {"r0": b}}


def doc(sizes, tool="gloo-bench", policy="single", world=4):
    return {"tool": tool, "op": "allreduce", "dtype": "float32", "world_size": world, "policy": policy,
            "rails": [{"name": "r0", "iface": "r0", "transport": "tcp"}], "host": {"cpus": 2},
            "results": [row(b) for b in sizes]}


def test_merge_sorts_and_keeps_top_fields():
    merged = merge_band_docs([("b2.json", doc([8192, 16384])), ("b1.json", doc([1024, 2048]))])
    assert [r["bytes"] for r in merged["results"]] == [1024, 2048, 8192, 16384]
    assert merged["tool"] == "gloo-bench" and merged["host"] == {"cpus": 2}


def test_merge_rejects_duplicate_size():
    with pytest.raises(ValueError, match=r"b2.json: size 2048 already measured in b1.json"):
        merge_band_docs([("b1.json", doc([1024, 2048])), ("b2.json", doc([2048]))])


@pytest.mark.parametrize("field,value", [("tool", "nezha-bench"), ("policy", "adaptive"), ("world_size", 2)])
def test_merge_rejects_disagreeing_bands(field, value):
    other = doc([4096])
    other[field] = value
    with pytest.raises(ValueError, match=f"b2.json: field '{field}'"):
        merge_band_docs([("b1.json", doc([1024])), ("b2.json", other)])


def test_merge_rejects_empty():
    with pytest.raises(ValueError):
        merge_band_docs([])


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.pop("results"), "missing field 'results'"),
    (lambda d: d.update(results={}), "field 'results' must be a list"),
    (lambda d: d.update(world_size="4"), "field 'world_size' must be a positive integer"),
    (lambda d: d["results"][0].pop("algbw_gbps"), r"results\[0\] missing field 'algbw_gbps'"),
    (lambda d: d["results"][0].update(bytes=-1), r"results\[0\].bytes must be a positive integer"),
    (lambda d: d["results"][0].update(time_us="fast"), r"results\[0\].time_us must be a number"),
])
def test_validate_names_the_field(mutate, msg):
    d = doc([1024])
    mutate(d)
    with pytest.raises(ValueError, match="x.json: " + msg):
        validate_tool_doc(d, "x.json")


def test_validate_rejects_non_object():
    with pytest.raises(ValueError, match="want a JSON object"):
        validate_tool_doc([1, 2], "x.json")


def test_constant_series_rows():
    rows = constant_series([1024, 2048], 0.1, 4)
    assert [r["algbw_gbps"] for r in rows] == [0.1, 0.1]
    assert rows[1]["time_us"] == pytest.approx(20.48)  # 2048 B at 1e8 B/s
    assert rows[0]["busbw_gbps"] == pytest.approx(0.15)


def test_median_of_repeats_takes_median_time_per_size():
    from bench.harness.merge import median_of_repeats

    def rep(times, check="ok"):
        d = doc([1024, 2048])
        for r, t in zip(d["results"], times):
            r["time_us"], r["algbw_gbps"], r["check"] = t, r["bytes"] / (t * 1e3), check
        return d

    src, merged = median_of_repeats([("a", rep([10, 40])), ("b", rep([30, 20])), ("c", rep([20, 30]))])
    assert src == "a+b+c"
    assert [r["time_us"] for r in merged["results"]] == [20, 30]
    assert merged["results"][0]["algbw_gbps"] == pytest.approx(1024 / 20e3)
    assert merged["results"][1]["repeats_time_us"] == [40, 20, 30]
    # Even count: the lower middle (faster) one; a failed check anywhere stays failed.
    _, two = median_of_repeats([("a", rep([10, 40])), ("b", rep([30, 20], check="failed"))])
    assert [r["time_us"] for r in two["results"]] == [10, 20]
    assert all(r["check"] == "failed" for r in two["results"])


def test_median_of_repeats_keeps_each_launchs_paired_speedup_and_their_median():
    from bench.harness.merge import median_of_repeats, paired_speedup

    def rep(times, paired):
        d = doc([1024])
        r = d["results"][0]
        r["time_us"], r["algbw_gbps"], r["op_trimmed_us"] = times, 1024 / (times * 1e3), times - 5
        r["paired"] = {"time_us": paired, "op_trimmed_us": paired - 5}
        return d

    # Launch-wide noise: b is slow on both sides, yet its own ratio is ~1 like the others'.
    _, merged = median_of_repeats([("a", rep(100, 110)), ("b", rep(300, 290)), ("c", rep(120, 114))])
    row = merged["results"][0]
    assert row["repeats_paired_speedup_mean"] == [pytest.approx(1.1), pytest.approx(290 / 300),
                                                  pytest.approx(0.95)]
    assert row["paired_speedup_mean"] == pytest.approx(290 / 300)
    # The judged one is of the trimmed means.
    assert row["repeats_paired_speedup"] == [pytest.approx(105 / 95), pytest.approx(285 / 295),
                                             pytest.approx(109 / 115)]
    assert row["paired_speedup"] == pytest.approx(285 / 295)
    assert paired_speedup({"time_us": 100}) is None
    assert paired_speedup({"time_us": 0, "paired": {"time_us": 5}}, "time_us") is None
    assert paired_speedup({"time_us": 10, "paired": {"time_us": 5}}) is None  # no trimmed mean
    # A repeat without a pair leaves the size without a paired speedup (never a partial median).
    _, part = median_of_repeats([("a", rep(100, 110)), ("b", doc([1024]))])
    assert "paired_speedup" not in part["results"][0]


def test_a_malformed_paired_measurement_is_rejected_by_name():
    d = doc([1024])
    d["results"][0]["paired"] = {"time_us": "fast"}
    with pytest.raises(ValueError, match=r"x: results\[0\]\.paired\.time_us must be a number"):
        validate_tool_doc(d, "x")
    d["results"][0]["paired"] = [1]
    with pytest.raises(ValueError, match="paired.time_us"):
        validate_tool_doc(d, "x")
    d["results"][0]["paired"] = {"time_us": 5.0, "op_trimmed_us": None}
    with pytest.raises(ValueError, match=r"x: results\[0\]\.paired\.op_trimmed_us must be a number"):
        validate_tool_doc(d, "x")
    d["results"][0]["paired"] = {"time_us": 5.0}
    d["results"][0]["op_p99_us"] = -1
    with pytest.raises(ValueError, match=r"x: results\[0\]\.op_p99_us must be a number"):
        validate_tool_doc(d, "x")


def test_median_of_repeats_rejects_different_sizes():
    from bench.harness.merge import median_of_repeats

    with pytest.raises(ValueError, match="b: sizes"):
        median_of_repeats([("a", doc([1024])), ("b", doc([2048]))])
