"""Priority scheduling in the PyTorch 2 backend (the TaLB paper's tensor-aware priorities): prioritised
collectives overtake queued ones in an order rank 0 decides for every rank; DDP with
nezha.torch.priority_hook trains like gloo."""
import pytest

import launch
from test_torch2_backend import train


@pytest.mark.parametrize("world,rails", [(2, 2), (3, 1)])
def test_priority_order_same_on_every_rank(world, rails):
    reps = launch.reports(launch.run("priority", world, launch.base_env(world, rails)))
    for r in reps:
        # Issue positions in the order the worker started them; 0 is the blocker holding the
        # worker busy. High (9), middle (5), then the tie (1, 1) in issue order.
        assert r["phases"]["reorder"] == [0, 4, 3, 1, 2], r["phases"]
        # An op without a priority (position 2) is never overtaken by one issued after it.
        assert r["phases"]["bounded"] == [0, 1, 2, 3], r["phases"]
        assert r["checked"] == 7, r
        # Every rank ran every collective in the same order as rank 0.
        assert r["order"] == reps[0]["order"], (r["order"], reps[0]["order"])
    errors = reps[0]["errors"]
    assert "ValueError" in errors["negative"] and "out of range" in errors["negative"], errors
    assert "out of range" in errors["too_large"], errors
    assert "TypeError" in errors["float"] and "priority must be an int" in errors["float"], errors
    assert "tensor must be a torch.Tensor" in errors["not_tensor"], errors
    assert "cannot reduce bool" in errors["bool_tensor"], errors
    assert "docs/nccl.md" in errors["device"], errors
    assert "priority -3 is out of range" in errors["backend_negative"], errors
    assert "CPU backend is nezha" in errors["gloo_group"], errors


def test_ddp_priority_hook_matches_gloo():
    nez = train("nezha", "ddp-priority")
    glo = train("gloo", "ddp")["losses"]
    assert nez["prioritised"] >= 12, nez  # the hook's allreduces went through the priority path
    assert nez["losses"] == pytest.approx(glo, rel=1e-4, abs=1e-5)
    assert nez["losses"][-1] < nez["losses"][0]
