"""The kind path's set-up: every command hack/kind.sh and hack/kind-sandbox/node-image.sh (and
what they source or run) call is part of every Debian system, installed by `hack/setup.sh kind`,
or checked with a message naming what to install — so a fresh machine never stops at a bare
"missing command" (hack/kind-sandbox/README.md, "From a fresh machine"). Also the Docker check's
messages and `hack/setup.sh kind` stopping on a machine without Docker before installing anything.

Run: /usr/bin/python3 -m pytest -q hack/tests/test_kind_setup.py
"""

import os
import re
import shutil
import subprocess

import pytest

from shell_commands import commands, defined_functions

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP_SH = os.path.join(REPO, "hack", "setup.sh")

# The kind path's entry points, with the NEZHA_KIND_SANDBOX value they run under: kind.sh runs on
# every Docker host; the node image script and the runtime wrapper (run by dockerd) only in the
# development sandbox.
ENTRY_POINTS = {
    "hack/kind.sh": "0",
    "hack/kind-sandbox/node-image.sh": "1",
    "hack/kind-sandbox/runc-drop-sys-resource.sh": "1",
}

# Commands outside Debian's required set, by the Debian package that provides them (None: not
# from Debian). A command the kind path starts to call that is in neither is reported: add it
# here, and either to hack/setup.sh's packages for kind or to a require_tool check.
COMMAND_PACKAGES = {
    "docker": "docker.io",
    "jq": "jq",
    "mmdebstrap": "mmdebstrap",
    "runc": "runc",
    "go": None,  # the toolchain go.mod names: Debian 12's golang-go is older
}

SOURCED = re.compile(r'^\s*(?:source|\.)\s+"\$(?:REPO|here)/(?:hack/)?([^"]+)"', re.M)
RUN_SCRIPT = re.compile(r'"\$(?:REPO|here)/(?:hack/)?([A-Za-z0-9/_-]+\.sh)"\s+[^|]')
REQUIRE_TOOL = re.compile(r'require_tool\s+([A-Za-z0-9_.-]+)\s+"([^"]*)"')
BUILTINS = set(subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True,
                              check=True).stdout.split())


def hack_path(relative):
    return os.path.join(REPO, "hack", relative)


def script_closure(entry):
    """The entry script and every hack/ script it sources or runs, recursively (repo-relative)."""
    todo, seen = [os.path.relpath(os.path.join(REPO, entry), os.path.join(REPO, "hack"))], []
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.append(rel)
        text = open(hack_path(rel)).read()
        here = os.path.dirname(rel)
        for found in SOURCED.findall(text) + RUN_SCRIPT.findall(text):
            # "$here/x.sh" in a script under hack/ is hack/x.sh; "$REPO/hack/x" is always hack/x.
            todo.append(found if os.path.exists(hack_path(found)) else os.path.join(here, found))
    return seen


def debian_base_package(command):
    """The required-priority Debian package (on every Debian system) that provides command on
    this machine, or None."""
    path = shutil.which(command)
    if path is None:
        return None
    # dpkg records files as shipped: /bin/cat where usr-merge made it /usr/bin/cat too.
    names = {os.path.basename(path), os.path.basename(os.path.realpath(path))}
    candidates = [path, os.path.realpath(path)] + [f"{d}/{n}" for n in names for d in ("/bin", "/usr/bin", "/sbin", "/usr/sbin")]
    for candidate in candidates:
        owner = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if owner.returncode != 0:
            continue
        package = owner.stdout.split(":")[0]
        priority = subprocess.run(["dpkg-query", "-W", "-f", "${Priority}", package],
                                  capture_output=True, text=True).stdout
        if priority == "required":
            return package
    return None


def setup_packages(sandbox):
    proc = subprocess.run([SETUP_SH, "--packages", "kind"], capture_output=True, text=True,
                          env=dict(os.environ, NEZHA_KIND_SANDBOX=sandbox), check=True)
    return set(proc.stdout.split())


def unaccounted(texts, packages):
    """Problems with the commands the scripts (name -> text) call: those neither builtin, defined
    in them, from Debian's required set, installed by set-up (packages), nor checked with a
    message naming what to install. An empty list means a fresh machine gets through."""
    everything = "\n".join(texts.values())
    functions = set().union(*(defined_functions(t) for t in texts.values()))
    checks = dict(REQUIRE_TOOL.findall(everything))
    problems = []
    for name, text in texts.items():
        for command in commands(text):
            if (command in BUILTINS or command in functions or not re.fullmatch(r"[A-Za-z0-9_.+-]+", command)):
                continue  # builtins, functions, and tools run by path ("$KIND", "$HELM")
            if command not in COMMAND_PACKAGES:
                if debian_base_package(command) is None:
                    problems.append(f"{name} calls '{command}': not from Debian's required set and not in "
                                    "COMMAND_PACKAGES; say which package provides it there")
                continue
            package = COMMAND_PACKAGES[command]
            if package in packages:
                continue
            if command == "docker":
                if "docker_problem" not in everything:
                    problems.append(f"{name} calls docker without docker_problem (hack/lib/docker-check.sh)")
                continue
            want = f"Debian package {package}" if package else "Go toolchain" if command == "go" else command
            if want not in checks.get(command, ""):
                problems.append(f"{name} calls '{command}': not installed by `hack/setup.sh kind` and not checked "
                                f"with require_tool naming '{want}' (checked: {checks.get(command)!r})")
    return problems


@pytest.mark.parametrize("entry,sandbox", sorted(ENTRY_POINTS.items()))
def test_every_command_of_the_kind_path_is_installed_by_setup_or_checked(entry, sandbox):
    texts = {rel: open(hack_path(rel)).read() for rel in script_closure(entry)}
    assert entry.removeprefix("hack/") in texts, texts.keys()
    assert unaccounted(texts, setup_packages(sandbox)) == []


def test_the_closure_follows_sourced_and_run_scripts():
    closure = script_closure("hack/kind-sandbox/node-image.sh")
    for rel in ["kind-sandbox/node-image.sh", "lib/common.sh", "lib/cluster-build.sh", "lib/docker-check.sh",
                "build-kube.sh", "versions.sh"]:
        assert rel in closure, closure


COMMON = open(hack_path("lib/common.sh")).read()


def test_an_unchecked_command_missing_from_setup_is_reported():
    # What happened before set-up knew of mmdebstrap: a bare `require_cmd mmdebstrap`.
    script = COMMON + 'build() {\n  require_cmd mmdebstrap\n  mmdebstrap --variant=minbase bookworm out.tar\n}\n'
    problems = unaccounted({"node-image.sh": script}, packages={"jq"})
    assert len(problems) == 1 and "'mmdebstrap'" in problems[0], problems
    assert unaccounted({"node-image.sh": script}, packages={"mmdebstrap"}) == []
    checked = script.replace("require_cmd mmdebstrap", 'require_tool mmdebstrap "install the Debian package mmdebstrap"')
    assert unaccounted({"node-image.sh": checked}, packages=set()) == []
    wrong = script.replace("require_cmd mmdebstrap", 'require_tool mmdebstrap "run hack/setup.sh"')
    assert len(unaccounted({"node-image.sh": wrong}, packages=set())) == 1


def test_a_command_nobody_knows_is_reported():
    problems = unaccounted({"kind.sh": COMMON + "frobnicate-the-nodes --all\n"}, packages=set())
    assert len(problems) == 1 and "frobnicate-the-nodes" in problems[0], problems


def test_setup_installs_mmdebstrap_for_the_sandbox_only():
    assert "mmdebstrap" in setup_packages("1")
    assert "mmdebstrap" not in setup_packages("0")
    assert {"jq", "runc"} <= setup_packages("0")


def test_setup_refuses_a_bad_mode_and_a_bad_sandbox_value():
    proc = subprocess.run([SETUP_SH, "--packages", "kindly"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown mode 'kindly'" in proc.stderr, proc.stderr
    proc = subprocess.run([SETUP_SH, "--packages", "kind"], capture_output=True, text=True,
                          env=dict(os.environ, NEZHA_KIND_SANDBOX="yes"))
    assert proc.returncode == 1 and "NEZHA_KIND_SANDBOX: want 0 or 1, got 'yes'" in proc.stderr, proc.stderr


def test_require_tool_names_what_to_install():
    proc = subprocess.run(["bash", "-c", f'PROG=t; source "{REPO}/hack/lib/common.sh"; '
                           'require_tool nezha-no-such-tool "install the Debian package nezha-pkg"; echo reached'],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "reached" not in proc.stdout, proc
    assert "missing command 'nezha-no-such-tool': install the Debian package nezha-pkg" in proc.stderr, proc.stderr


def fake_bin(tmp_path, scripts):
    """A PATH directory with bash and dirname, plus the given fake commands (name -> body)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for real in ["bash", "dirname"]:
        os.symlink(shutil.which(real), bindir / real)
    for name, body in scripts.items():
        (bindir / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
        (bindir / name).chmod(0o755)
    return str(bindir)


def docker_problem(path):
    return subprocess.run([shutil.which("bash"), "-c", f'source "{REPO}/hack/lib/docker-check.sh"; docker_problem'],
                          capture_output=True, text=True, env={"PATH": path})


def test_docker_missing_names_the_package_and_how_to_start_it(tmp_path):
    proc = docker_problem(fake_bin(tmp_path, {}))
    assert proc.returncode == 1
    assert proc.stdout.startswith("Docker is not installed: install the Debian package docker.io"), proc.stdout
    assert "dockerd &" in proc.stdout and "hack/kind-sandbox/README.md" in proc.stdout


def test_a_docker_cli_without_an_engine_names_the_package(tmp_path):
    proc = docker_problem(fake_bin(tmp_path, {"docker": "exit 1"}))
    assert proc.returncode == 1 and "no dockerd" in proc.stdout and "docker.io" in proc.stdout, proc.stdout


def test_a_stopped_daemon_is_told_to_start(tmp_path):
    proc = docker_problem(fake_bin(tmp_path, {"docker": "exit 1", "dockerd": "exit 1"}))
    assert proc.returncode == 1 and proc.stdout.startswith("Docker's daemon does not answer"), proc.stdout
    assert "systemctl start docker" in proc.stdout


def test_a_working_docker_is_no_problem(tmp_path):
    proc = docker_problem(fake_bin(tmp_path, {"docker": '[ "$1" = info ]'}))
    assert proc.returncode == 0 and proc.stdout == "", proc


def test_setup_kind_without_docker_stops_before_installing_anything(tmp_path):
    # No apt-get, dpkg-query or docker on PATH: were set-up to go past the Docker check, it would
    # fail differently (and on a real machine it would have installed packages first).
    path = fake_bin(tmp_path, {"go": "exit 0"})
    proc = subprocess.run([SETUP_SH, "kind"], capture_output=True, text=True, env={"PATH": path, "HOME": str(tmp_path)})
    assert proc.returncode == 1, proc
    assert "setup: the kind path needs Docker: Docker is not installed: install the Debian package docker.io" \
        in proc.stderr, proc.stderr
    assert "installing" not in proc.stderr and "building" not in proc.stderr, proc.stderr
