"""torch.distributed backend "nezha": real multi-process jobs on loopback rails, checked against gloo."""
import pytest

import nezha_launch as launch


@pytest.mark.parametrize("world", [2, 3])
def test_collectives_match_gloo(world):
    env = launch.base_env(world)
    results = launch.run("collectives", world, env)
    assert all(rc == 0 for rc, _, _ in results), launch.describe(results)
    reports = [r for _, r, _ in results]
    per_rank = len(launch_sizes()) * 6 * (4 * 2 + world + 1)
    assert all(r["checked"] == per_rank for r in reports), reports
    errors = reports[0]["errors"]
    assert "AVG" in errors["avg"] and "not supported" in errors["avg"], errors
    assert "int16" in errors["int16"] and "not supported" in errors["int16"], errors
    assert "uint8" in errors["uint8"], errors
    assert "contiguous" in errors["noncontig"], errors
    assert "reduce is not implemented" in errors["reduce"], errors


def launch_sizes():
    import nezha_workers as workers
    return workers.SIZES


def test_ddp_training_matches_gloo():
    world = 2
    params = {}
    for backend in ("gloo", "nezha"):
        env = launch.base_env(world)
        env["BACKEND"] = backend
        results = launch.run("ddp", world, env)
        assert all(rc == 0 for rc, _, _ in results), launch.describe(results)
        ranks = [r["params"] for _, r, _ in results]
        assert ranks[0] == ranks[1], f"{backend}: ranks ended with different parameters"
        params[backend] = ranks[0]
    assert len(params["nezha"]) == len(params["gloo"]) > 100
    # Allreduce of two ranks is a single addition, so both backends give bit-identical gradients.
    assert params["nezha"] == pytest.approx(params["gloo"], rel=1e-6, abs=1e-7)


def _init_error(world, env, rank_env=None):
    results = launch.run("init_only", world, env, rank_env=rank_env)
    reports = [r for _, r, _ in results]
    assert all(r is not None for r in reports), launch.describe(results)
    return reports


def test_missing_rails_is_a_clear_error():
    env = launch.base_env(1)
    del env["NEZHA_RAILS"]
    [r] = _init_error(1, env)
    assert r["error"] == "ConfigError" and "NEZHA_RAILS" in r["message"], r


def test_malformed_rails_names_the_entry():
    env = launch.base_env(1, rails="r0=lo")
    [r] = _init_error(1, env)
    assert r["error"] == "ConfigError" and "r0=lo" in r["message"], r


def test_rank_disagreeing_with_nezha_rank_env():
    env = launch.base_env(1)
    env["NEZHA_RANK"] = "3"
    [r] = _init_error(1, env)
    assert r["error"] == "ConfigError" and "NEZHA_RANK=3" in r["message"], r


def test_disagreeing_rails_fail_every_rank_without_hang():
    env = launch.base_env(2)
    reports = _init_error(2, env, rank_env=lambda rank: {"NEZHA_RAILS": "r0=lo:tcp" if rank else "r0=lo:tcp,r1=lo:tcp"})
    for r in reports:
        assert r["error"] == "ConfigError", r
        assert "rail" in r["message"].lower(), r


def test_wrong_token_is_an_auth_error():
    env = launch.base_env(2)
    env["NEZHA_RENDEZVOUS_TIMEOUT_MS"] = "4000"  # the rejected rank's peer waits this long
    reports = _init_error(2, env, rank_env=lambda rank: {"NEZHA_JOB_TOKEN": f"{rank}" * 64})
    assert any(r["error"] == "AuthError" for r in reports), reports
    assert all(r["error"] is not None for r in reports), reports
