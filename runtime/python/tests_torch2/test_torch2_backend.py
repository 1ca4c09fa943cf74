"""The PyTorch 2 c10d backend "nezha" (runtime/python/csrc): every collective against gloo in the
same job, DDP and FSDP2 training against gloo, a rail cut in the middle of DDP training."""
import pytest

import launch


@pytest.mark.parametrize("world,rails", [(2, 1), (3, 2), (4, 3)])
def test_collectives_match_gloo(world, rails):
    results = launch.run("collectives", world, launch.base_env(world, rails))
    reps = launch.reports(results)
    assert reps[0]["checked"] >= 400, reps[0]  # 2 ranks: 492 exact comparisons
    assert not reps[0]["skipped"], reps[0]
    errors = reps[0]["errors"]
    assert "does not support dtype" in errors["dtype"], errors
    assert "alltoallv" in errors["mismatch"], errors
    assert all(r["checked"] == reps[0]["checked"] for r in reps)


def train(backend, mode, world=2, steps=12, cut=-1, rails=2):
    env = launch.base_env(world, rails)
    args = [backend, mode, str(steps)] + ([str(cut)] if cut >= 0 else [])
    reps = launch.reports(launch.run("train", world, env, args))
    assert all(r["losses"] == reps[0]["losses"] for r in reps)
    return reps[0]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_training_matches_gloo(mode):
    nez = train("nezha", mode)["losses"]
    glo = train("gloo", mode)["losses"]
    assert len(nez) == len(glo) == 12
    assert nez == pytest.approx(glo, rel=1e-4, abs=1e-5)
    assert nez[-1] < nez[0]  # it learns


def test_rail_cut_mid_ddp_keeps_training():
    uncut = train("nezha", "ddp", steps=10)
    cut = train("nezha", "ddp", steps=10, cut=4)
    assert cut["failovers"] >= 1, cut
    assert cut["losses"] == pytest.approx(uncut["losses"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("world,rails", [(2, 1), (4, 2)])
def test_send_recv_pipeline(world, rails):
    reps = launch.reports(launch.run("p2p", world, launch.base_env(world, rails)))
    for r in reps:
        assert r["losses"] == pytest.approx(r["reference"], rel=1e-5, abs=1e-6), r
        assert r["losses"][-1] < r["losses"][0]
    assert "got 16 bytes, the tensor holds 12" in reps[1]["errors"]["size"], reps[1]
    assert "docs/nccl.md" in reps[0]["errors"]["device"], reps[0]


def test_shutdown_finishes_queued_work_then_refuses():
    reps = launch.reports(launch.run("shutdown", 2, launch.base_env(2, 2)))
    for r in reps:
        assert r["sum"] == r["want"] == 3.0, r
        errors = r["errors"]
        # Whichever comes first: this rank's own shutdown, or the peer's closing its link.
        pending = errors["pending_recv"]
        assert ("shut down before the message arrived" in pending
                or "connection closed by peer" in pending), r
        for op in ("allreduce", "send", "recv"):
            assert "shut down" in errors.get(op, ""), (op, r)


def test_exit_without_destroy_process_group():
    for _ in range(3):
        reps = launch.reports(launch.run("exit", 2, launch.base_env(2, 1)))
        assert all(r["ops"] == 20 for r in reps), reps


@pytest.mark.parametrize("world", [2, 4])
def test_several_groups_and_subgroups(world):
    reps = launch.reports(launch.run("groups", world, launch.base_env(world, 2)))
    total = world * (world + 1) / 2
    for rank, r in enumerate(reps):
        assert r["sums"]["again"] == r["sums"]["world"] == total, r
        if world == 4:
            assert r["sums"]["sub"] == (3.0 if rank < 2 else 7.0), (rank, r)
