"""Round-free small operations (runtime/src/failover/failover_engine.cc FailoverEngine::roundFree).

A cold allreduce up to NEZHA_ROUND_FREE_BYTES (64 KiB) on one rail, with every rail alive,
skips its per-op agreement round; every kConfirmEvery-th operation (16: opCounter 1, 17, 33, ...)
holds it to confirm the kept one. A split (hot) operation always holds its round. So a loop of
small operations pays one round per 16 operations, not one per operation: what the runtime does
with its dissemination round (with the earlier runtime's all-to-all round), and what this module
prices next to the other schemes.
"""

from .op import run_op

ROUND_FREE_BYTES = 64 << 10  # NEZHA_ROUND_FREE_BYTES default
CONFIRM_EVERY = 16  # communicator_impl.h kConfirmEvery


def skips_round(policy, nbytes, op_number, round_free_bytes=ROUND_FREE_BYTES, ratios=None, force=None):
    """Whether operation number op_number (1-based, the runtime's opCounter) of this size runs
    without its round."""
    if round_free_bytes <= 0 or policy.n < 2 or nbytes > round_free_bytes:
        return False
    if len(policy.plan(nbytes, ratios, force)) != 1:  # a split: a peer's data may wait on another rail
        return False
    if (op_number - 1) % CONFIRM_EVERY == 0:
        return False
    return all(policy.alive)


def loop_seconds(policy, nbytes, scheme="all-to-all", round_free_bytes=ROUND_FREE_BYTES, ratios=None, force=None,
                 ops=CONFIRM_EVERY):
    """Mean seconds per operation over `ops` back-to-back operations of this size (operations 1..ops,
    so one confirming round per CONFIRM_EVERY), and how many of them skipped their round."""
    free = sum(skips_round(policy, nbytes, k, round_free_bytes, ratios, force) for k in range(1, ops + 1))
    held = run_op(policy, nbytes, ratios, scheme, force).seconds
    without = run_op(policy, nbytes, ratios, scheme, force, hold_round=False).seconds if free else 0.0
    return (free * without + (ops - free) * held) / ops, free
