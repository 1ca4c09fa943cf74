"""Tests for nezha_control_sign.py: the runtime's and operator's vector, the token rules, fresh nonces."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIGN = os.path.join(HERE, "nezha_control_sign.py")
TOKEN = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
# The same vector as RequestAuthTest.MatchesTheOperatorsVector (C++) and the operator's Go test.
VECTOR = ("Nezha-HMAC-SHA256 ts=1700000000, nonce=00112233445566778899aabbccddeeff, "
          "sig=ca740fdd1c3209a52ec73220e0d1b8868cb7d4c0542354d49374e730dc4e8f3e")


def sign(env, *args):
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEZHA_JOB_TOKEN")}
    return subprocess.run([sys.executable, SIGN, *args], env=base | env, capture_output=True, text=True)


def test_signs_the_runtimes_vector_from_either_token_source(tmp_path):
    fixed = ("POST", "/rails/r1/drain", "--ts", "1700000000", "--nonce", "00112233445566778899aabbccddeeff")
    r = sign({"NEZHA_JOB_TOKEN": TOKEN}, *fixed)
    assert (r.returncode, r.stdout.strip()) == (0, VECTOR), r.stderr
    # The mounted Secret's file, with the trailing newline an editor would add, signs the same.
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    r = sign({"NEZHA_JOB_TOKEN_FILE": str(f)}, *fixed)
    assert (r.returncode, r.stdout.strip()) == (0, VECTOR), r.stderr


def test_each_call_has_a_fresh_nonce():
    a, b = (sign({"NEZHA_JOB_TOKEN": TOKEN}, "POST", "/rails/r1/drain").stdout for _ in range(2))
    assert a.startswith("Nezha-HMAC-SHA256 ts=") and a != b


def test_token_errors_name_the_variable(tmp_path):
    r = sign({}, "POST", "/rails/r1/drain")
    assert r.returncode == 2 and "NEZHA_JOB_TOKEN_FILE nor NEZHA_JOB_TOKEN" in r.stderr
    r = sign({"NEZHA_JOB_TOKEN_FILE": str(tmp_path / "missing")}, "POST", "/rails/r1/drain")
    assert r.returncode == 2 and f"NEZHA_JOB_TOKEN_FILE={tmp_path / 'missing'}: cannot read" in r.stderr
    f = tmp_path / "token"
    f.write_text(TOKEN)
    r = sign({"NEZHA_JOB_TOKEN_FILE": str(f), "NEZHA_JOB_TOKEN": "ab" * 32}, "POST", "/rails/r1/drain")
    assert r.returncode == 2 and "hold different tokens" in r.stderr
    r = sign({"NEZHA_JOB_TOKEN": TOKEN}, "POST", "rails/r1/drain")
    assert r.returncode == 2 and "PATH must start with '/'" in r.stderr
