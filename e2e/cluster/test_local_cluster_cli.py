"""local-cluster.sh's command line: bad input is refused before anything on the host changes.
These tests never start a cluster."""

import os
import subprocess

import pytest

from cluster_helpers import LOCAL_CLUSTER

NOWHERE = "/tmp/nzt-no-cluster-here"


def run(*args, **env):
    full_env = {**os.environ, "NEZHA_CLUSTER_DIR": NOWHERE, **env}
    proc = subprocess.run([LOCAL_CLUSTER, *args], capture_output=True, text=True, env=full_env, timeout=600)
    if args[0] == "up" and proc.returncode == 0:
        # Bad input was accepted and a cluster started: take it down before failing the test.
        subprocess.run([LOCAL_CLUSTER, "down"], capture_output=True, env=full_env, timeout=600)
        pytest.fail(f"up {args[1:]} with {env} started a cluster instead of refusing")
    return proc


@pytest.mark.parametrize("env, word", [
    ({"NEZHA_CLUSTER_RAILS": "two"}, "NEZHA_CLUSTER_RAILS"),
    ({"NEZHA_CLUSTER_RAILS": "9"}, "NEZHA_CLUSTER_RAILS"),
    ({"NEZHA_CLUSTER_RAIL_PREFIX": "Rail-"}, "NEZHA_CLUSTER_RAIL_PREFIX"),
    ({"NEZHA_CLUSTER_API_PORT": "80"}, "NEZHA_CLUSTER_API_PORT"),
    ({"NEZHA_CLUSTER_NODE": "Node_1"}, "NEZHA_CLUSTER_NODE"),
    ({"NEZHA_CLUSTER_DIR": "relative/dir"}, "NEZHA_CLUSTER_DIR"),
    ({"NEZHA_CLUSTER_DIR": "/tmp/" + "x" * 90}, "NEZHA_CLUSTER_DIR"),
])
def test_bad_environment_names_the_variable(env, word):
    for command in ("up", "down"):
        proc = run(command, **env)
        assert proc.returncode == 2, proc.stderr
        assert word in proc.stderr, proc.stderr
    assert not os.path.exists(env.get("NEZHA_CLUSTER_DIR", NOWHERE))


@pytest.mark.parametrize("args, word", [
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["up", "now"], "unexpected argument 'now'"),
    (["load-image"], "TARFILE"),
    (["load-image", "a.tar", "b.tar"], "TARFILE"),
])
def test_bad_arguments(args, word):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert word in proc.stderr


def test_status_of_a_cluster_that_is_not_up():
    proc = run("status")
    assert proc.returncode == 3 and "down" in proc.stdout


def test_down_without_a_cluster_is_fine():
    if os.geteuid() != 0:
        pytest.skip("down needs root")
    proc = run("down")
    assert proc.returncode == 0, proc.stderr


def test_env_and_kubeconfig_point_into_the_state_dir():
    env = dict(line.removeprefix("export ").split("=", 1) for line in run("env").stdout.splitlines())
    assert env["KUBECONFIG"] == f"{NOWHERE}/admin.kubeconfig"
    assert env["NEZHA_CNI_BIN_DIR"] == f"{NOWHERE}/cni/bin"
    assert env["NEZHA_CLUSTER_RAIL_IFACES"] == "nzr0,nzr1"
    assert run("kubeconfig").stdout.strip() == f"{NOWHERE}/admin.kubeconfig"


@pytest.mark.parametrize("plugins", ["relative/nezha-rail", "/nonexistent/nezha-rail", "{not_executable}"])
def test_bad_cni_plugins_refused_by_up_but_not_by_down(plugins, tmp_path):
    not_executable = tmp_path / "nezha-rail"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    plugins = plugins.format(not_executable=not_executable)
    proc = run("up", NEZHA_CLUSTER_CNI_PLUGINS=plugins)
    assert proc.returncode == 2 and "NEZHA_CLUSTER_CNI_PLUGINS" in proc.stderr, proc.stderr
    assert not os.path.exists(NOWHERE)
    if os.geteuid() == 0:
        assert run("down", NEZHA_CLUSTER_CNI_PLUGINS=plugins).returncode == 0
