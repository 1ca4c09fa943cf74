#!/usr/bin/env python3
"""Signs one request to the runtime's control endpoint; prints its Authorization header value.

    nezha_control_sign.py METHOD PATH        e.g.  nezha_control_sign.py POST /rails/r1/drain

The job token comes from the environment exactly as the runtime reads it (runtime/README.md
"Configuration"): the file named by NEZHA_JOB_TOKEN_FILE (one trailing newline ignored) or
NEZHA_JOB_TOKEN; both set must agree. The output is

    Nezha-HMAC-SHA256 ts=<unix seconds>, nonce=<32 hex>, sig=<64 hex>

with sig = HMAC-SHA256(key = control credential, message = "nezha-control-v2\\n" METHOD "\\n"
PATH "\\n" ts "\\n" nonce) and the control credential = hex HMAC-SHA256(job token,
"nezha/control/v1") (runtime/src/control/request_auth.h; docs/security.md "Control endpoint").
Each call signs with a fresh nonce: the endpoint accepts a signature once, within 30 s of ts, so
sign every request just before sending it. This is the one signer for scripts (test bed,
benchmarks); the operator signs in Go (operator/internal/prober/http.go), the runtime verifies in
C++, and all three agree on the vector in runtime/tests/control/request_auth_test.cc.
"""

import argparse
import hashlib
import hmac
import os
import secrets
import sys
import time

SCHEME = "Nezha-HMAC-SHA256"
CREDENTIAL_MESSAGE = b"nezha/control/v1"
SIGNATURE_PREFIX = "nezha-control-v2"


class TokenError(Exception):
    """The job token cannot be read from the environment; the message names the variable."""


def job_token(env):
    """The job token from NEZHA_JOB_TOKEN_FILE or NEZHA_JOB_TOKEN, by the runtime's rules."""
    in_env = env.get("NEZHA_JOB_TOKEN", "")
    path = env.get("NEZHA_JOB_TOKEN_FILE", "")
    if not path:
        if not in_env:
            raise TokenError("neither NEZHA_JOB_TOKEN_FILE nor NEZHA_JOB_TOKEN is set")
        return in_env.encode()
    try:
        with open(path, "rb") as f:
            token = f.read()
    except OSError as e:
        raise TokenError(f"NEZHA_JOB_TOKEN_FILE={path}: cannot read file ({e.strerror})") from e
    if token.endswith(b"\n"):
        token = token[:-1]
    if in_env and in_env.encode() != token:
        raise TokenError("NEZHA_JOB_TOKEN_FILE and NEZHA_JOB_TOKEN are both set and hold different tokens")
    if not token:
        raise TokenError(f"NEZHA_JOB_TOKEN_FILE={path}: the file is empty")
    return token


def control_credential(token):
    return hmac.new(token, CREDENTIAL_MESSAGE, hashlib.sha256).hexdigest()


def authorization(token, method, path, unix_seconds, nonce):
    """The Authorization header value for METHOD PATH signed at unix_seconds with nonce."""
    message = "\n".join([SIGNATURE_PREFIX, method, path, str(unix_seconds), nonce]).encode()
    sig = hmac.new(control_credential(token).encode(), message, hashlib.sha256).hexdigest()
    return f"{SCHEME} ts={unix_seconds}, nonce={nonce}, sig={sig}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("method", help="HTTP method, e.g. POST")
    p.add_argument("path", help="request path, e.g. /rails/r1/drain")
    # Fixed values only for reproducing a known vector; a real request needs a fresh pair.
    p.add_argument("--ts", type=int, help=argparse.SUPPRESS)
    p.add_argument("--nonce", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not a.path.startswith("/"):
        p.error(f"PATH must start with '/': {a.path!r}")
    try:
        token = job_token(os.environ)
    except TokenError as e:
        print(f"nezha_control_sign: {e}", file=sys.stderr)
        return 2
    ts = a.ts if a.ts is not None else int(time.time())
    nonce = a.nonce if a.nonce is not None else secrets.token_hex(16)
    print(authorization(token, a.method, a.path, ts, nonce))
    return 0


if __name__ == "__main__":
    sys.exit(main())
