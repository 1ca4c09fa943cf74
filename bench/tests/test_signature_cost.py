from bench.harness import signature_cost as sc


def test_trimmed_mean_drops_the_slowest_two_percent():
    times = [1.0] * 98 + [100.0, 100.0]
    assert sc.trimmed_mean(times) == 1.0


def test_slowest_rank_and_ratio():
    row = sc.size_ratio([{"on": [2.0], "off": [1.0]}, {"on": [3.0], "off": [2.0]}])
    assert row == {"on_s": 3.0, "off_s": 2.0, "ratio": 1.5}


def test_judge_per_band():
    rows = {"1024": {"ratio": 1.04}, "65536": {"ratio": 1.02}, "1048576": {"ratio": 1.02},
            "4194304": {"ratio": 1.0}, "262144": {"ratio": 9.0}}  # 256K: in no band
    out = sc.judge(rows)
    assert out["small"]["verdict"] == "PASS" and out["small"]["worst_size"] == 1024
    assert out["large"]["verdict"] == "MISS" and out["large"]["worst_size"] == 1048576
    assert sc.judge({})["large"]["verdict"] == "NOT RUN"
