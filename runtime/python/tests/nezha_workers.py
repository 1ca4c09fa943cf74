"""Rank-side scenarios started by nezha_launch.py: `nezha_workers.py SCENARIO`, rank in RANK, world in WORLD_SIZE.

Each prints one `REPORT {json}` line; any exception exits non-zero with its traceback.
(torch.distributed scenarios are in ../tests_torch2.)
"""
import json
import os
import sys


def report(**fields):
    print("REPORT " + json.dumps(fields), flush=True)


def scenario_numpy():
    """The plain binding (no torch.distributed): numpy buffers, in place and out of place."""
    import numpy as np
    import nezha
    with nezha.Communicator() as comm:
        rank, world = comm.rank, comm.world_size
        a = np.arange(100003, dtype=np.float64) + rank
        out = np.empty_like(a)
        comm.allreduce(a, out, op="sum")
        assert np.array_equal(out, np.arange(100003) * world + sum(range(world))), out[:4]
        comm.allreduce(a, op=nezha.ReduceOp.MAX)  # in place
        assert np.array_equal(a, np.arange(100003) + world - 1)
        g = np.empty(world * 5, dtype=np.int32)
        comm.allgather(np.full(5, rank, dtype=np.int32), g)
        assert g.tolist() == [r for r in range(world) for _ in range(5)], g
        rs = np.empty(3, dtype=np.float32)
        comm.reduce_scatter(np.arange(3 * world, dtype=np.float32), rs, op="min")
        assert rs.tolist() == list(range(3 * rank, 3 * rank + 3)), rs
        sent = np.array([100 * rank + p for p in range(world) for _ in range(3)], dtype=np.int32)
        got = np.empty_like(sent)
        comm.alltoall(sent, got)
        assert got.tolist() == [100 * p + rank for p in range(world) for _ in range(3)], got
        b = np.full(7, rank, dtype=np.int64)
        comm.broadcast(b, root=world - 1)
        assert b.tolist() == [world - 1] * 7
        comm.barrier()
        table = os.environ.get("TABLE_OUT")
        if table and rank == 0:
            comm.save_table(table)
        report(rank=rank, world=world)


def scenario_signed():
    """Signed operations (Communicator.sign_next_op): ranks that sign alike get their result;
    equal sizes signed differently (float32 vs int32) raise MismatchError naming both ranks,
    and the communicator refuses what follows."""
    import numpy as np
    import nezha
    with nezha.Communicator() as comm:
        rank = comm.rank
        a = np.ones(4, dtype=np.float32)
        comm.sign_next_op(b"allreduce f32[4] sum")
        comm.allreduce(a)
        assert a.tolist() == [2.0] * 4, a
        b = np.ones(4, dtype=np.int32) if rank else np.ones(4, dtype=np.float32)
        comm.sign_next_op(b"allreduce i32[4] sum" if rank else b"allreduce f32[4] sum")
        try:
            comm.allreduce(b)
            mismatch = ""
        except nezha.MismatchError as e:
            mismatch = str(e)
        try:
            comm.allreduce(a)
            after = "usable"
        except nezha.NezhaError as e:
            after = type(e).__name__
        report(rank=rank, mismatch=mismatch, after=after)


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]]()
