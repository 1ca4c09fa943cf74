"""NEZHA_* settings a torch process group derives from torch's own."""
import os

from .errors import ConfigError


def _rendezvous_from_master(env):
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not addr or not port:
        raise ConfigError("NEZHA_RENDEZVOUS is unset and cannot be derived: MASTER_ADDR and "
                          "MASTER_PORT must both be set (NEZHA_RENDEZVOUS defaults to "
                          "MASTER_ADDR:MASTER_PORT+1)")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"MASTER_PORT={port!r} is not a port number "
                          "(needed to derive NEZHA_RENDEZVOUS)") from None
    if not 0 < p < 65535:
        raise ConfigError(f"MASTER_PORT={p} leaves no room for NEZHA_RENDEZVOUS=MASTER_PORT+1 (want 1-65534)")
    return f"{addr}:{p + 1}"


def _check_agrees(env, name, value):
    given = env.get(name)
    if given is not None and given != "" and given != str(value):
        raise ConfigError(f"{name}={given} disagrees with init_process_group ({value})")


def communicator_env(rank, size, env=None, derive_rendezvous=True):
    """The NEZHA_* overrides for a communicator of this process group (exposed for tests).
    derive_rendezvous=False: the group finds its rendezvous through torch's store instead."""
    env = os.environ if env is None else env
    _check_agrees(env, "NEZHA_RANK", rank)
    _check_agrees(env, "NEZHA_WORLD_SIZE", size)
    out = {"NEZHA_RANK": str(rank), "NEZHA_WORLD_SIZE": str(size)}
    if derive_rendezvous and size > 1 and not env.get("NEZHA_RENDEZVOUS"):
        out["NEZHA_RENDEZVOUS"] = _rendezvous_from_master(env)
    # The runtime reads the token itself (NEZHA_JOB_TOKEN_FILE, the mounted Secret the operator
    # gives pods, or NEZHA_JOB_TOKEN for bare use); here only its absence is caught early.
    if size > 1 and not env.get("NEZHA_JOB_TOKEN") and not env.get("NEZHA_JOB_TOKEN_FILE"):
        raise ConfigError(
            "NEZHA_JOB_TOKEN is not set: every rank needs the job's secret, in the file named by "
            "NEZHA_JOB_TOKEN_FILE (the operator mounts it) or in NEZHA_JOB_TOKEN (by hand use "
            "`openssl rand -hex 32`, the same for every rank). Nezha does not pass it through "
            "torch's store, which is unauthenticated.")
    return out
