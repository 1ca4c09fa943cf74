import pytest

from bench.harness.config import Scenario
from bench.harness.series import OPT_IN_SERIES, SERIES, by_name, make_launch, warmup_for
from bench.harness.sizes import Band

SPECS = {s.name: s for s in SERIES}
HET = Scenario("heterogeneous", (800, 300))


def test_warmup_equal_for_small_bands_adaptive_only_for_big():
    small, big = Band(1024, 4 << 20, 2, 10), Band(8 << 20, 32 << 20, 1, 3)
    assert warmup_for(SPECS["gloo-best-rail"], small, 10) == 10
    assert warmup_for(SPECS["gloo-best-rail"], big, 10) == 1
    assert warmup_for(SPECS["nezha-adaptive"], big, 10) == 10
    assert warmup_for(SPECS["nezha-adaptive"], Band(1024, 1024, 20, 1), 10) == 20


def test_by_name_rejects_unknown():
    with pytest.raises(ValueError, match="--series: unknown series 'x'"):
        by_name(["x"])
    assert [s.name for s in by_name(["gloo-mptcp", "nezha-single"])] == ["nezha-single", "gloo-mptcp"]


def launch(name, scen=HET):
    return make_launch(SPECS[name], scen, 4, "/t/tool", Band(1024, 2048, 1, 2), 1, "/w/x.json", True,
                       "/w/store", "10.100.0.10:29501")


def test_nezha_launch_env_carries_all_rails_and_policy():
    lc = launch("nezha-static")
    assert lc.argv(2) == ["/t/tool", "--op", "allreduce", "--dtype", "float32", "--min-bytes", "1024",
                          "--max-bytes", "2048", "--factor", "2", "--warmup", "1", "--iters", "2",
                          "--json", "/w/x.json", "--check"]
    env = lc.env(2)
    assert env["NEZHA_RAILS"] == "r0=r0:tcp,r1=r1:tcp"
    assert (env["NEZHA_RANK"], env["NEZHA_WORLD_SIZE"], env["NEZHA_POLICY"]) == ("2", "4", "static")
    assert env["NEZHA_RENDEZVOUS"] == "10.100.0.10:29501" and len(env["NEZHA_JOB_TOKEN"]) == 64


def test_cc_series_set_the_runtimes_congestion_control_and_the_others_leave_its_default():
    assert launch("nezha-adaptive-hostcc").env(0)["NEZHA_TCP_CONGESTION"] == "host"
    assert launch("nezha-adaptive-cubic").env(0)["NEZHA_TCP_CONGESTION"] == "cubic"
    assert "NEZHA_TCP_CONGESTION" not in launch("nezha-adaptive").env(0)


def test_a_plain_run_leaves_the_cc_series_out():
    from bench.run_bench import parse_args

    names = [s.name for s in parse_args([]).series_specs]
    assert "nezha-adaptive" in names and not set(OPT_IN_SERIES) & set(names)
    assert [s.name for s in parse_args(["--series", "nezha-adaptive-hostcc"]).series_specs] == ["nezha-adaptive-hostcc"]


def test_gloo_launch_binds_best_rail():
    lc = launch("gloo-best-rail", Scenario("x", (300, 800)))
    argv = lc.argv(3)
    assert argv[argv.index("--iface") + 1] == "r1" and argv[argv.index("--rank") + 1] == "3"
    assert lc.env(3) == {}


def test_mptcp_launch_wraps_with_mptcpize():
    argv = launch("gloo-mptcp").argv(0)
    assert argv[:3] == ["mptcpize", "run", "/t/tool"]
    assert argv[argv.index("--rail-name") + 1] == "mptcp(r0+)"


def test_pinned_band_puts_each_rank_on_its_own_core_and_other_bands_run_free(stopped_launch, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    homogeneous = Scenario("homogeneous", (500, 500))
    pinned = stopped_launch(homogeneous, SPECS["gloo-mptcp"], Band(1024, 2048, 1, 2, pinned=True))["argv"](1)
    assert pinned[:3] == ["taskset", "--cpu-list", "1"] and pinned[3:5] == ["mptcpize", "run"]
    free = stopped_launch(homogeneous, SPECS["gloo-mptcp"], Band(1024, 2048, 1, 2))["argv"](1)
    assert free[:2] == ["mptcpize", "run"]


def test_the_latency_band_is_pinned_and_the_byte_moving_bands_are_not():
    from bench.harness.config import FULL_BANDS, QUICK_BANDS
    from bench.harness.sizes import clip_bands

    for bands in (FULL_BANDS, QUICK_BANDS):
        assert [b.pinned for b in bands] == [b.max_bytes <= 64 << 10 for b in bands]
    assert clip_bands(list(FULL_BANDS), 2048, 1 << 20)[0].pinned  # --min/--max-bytes keep it


def test_the_latency_band_pairs_adaptive_and_single_rail_in_one_launch_each_way(stopped_launch):
    from bench.harness.config import FULL_BANDS, QUICK_BANDS
    from bench.harness.sizes import clip_bands

    for bands in (FULL_BANDS, QUICK_BANDS):
        assert [b.paired for b in bands] == ["single" if b.max_bytes <= 64 << 10 else "" for b in bands]
    assert clip_bands(list(FULL_BANDS), 2048, 1 << 20)[0].paired == "single"
    band = Band(1024, 2048, 1, 2, pinned=True, paired="single")
    adaptive = stopped_launch(HET, SPECS["nezha-adaptive"], band)["argv"](0)
    assert adaptive[adaptive.index("--paired-policy") + 1] == "single"
    # The single series carries the reverse pair (adaptive second), so a first-communicator
    # bias cancels; the others (and unpaired bands) run alone.
    single = stopped_launch(HET, SPECS["nezha-single"], band)["argv"](0)
    assert single[single.index("--paired-policy") + 1] == "adaptive"
    for name in ("nezha-static", "gloo-best-rail"):
        assert "--paired-policy" not in stopped_launch(HET, SPECS[name], band)["argv"](0)
    assert "--paired-policy" not in stopped_launch(HET, SPECS["nezha-single"], Band(1024, 2048, 1, 2))["argv"](0)
    assert "--paired-policy" not in stopped_launch(HET, SPECS["nezha-adaptive"], Band(1024, 2048, 1, 2))["argv"](0)


def test_launches_step_rendezvous_ports_by_two_for_the_paired_communicator():
    from bench.harness import runner
    from bench.harness.config import load_tunables

    ctx = runner.RunContext(tun=load_tunables(), bed=None, bands=[], work_dir="/w", check=True, iperf=False)
    first, second = ctx.next_port(), ctx.next_port()
    assert second - first == 2  # a paired launch also uses first + 1
