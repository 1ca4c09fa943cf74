"""shell_commands: the command words of a bash script, as test_kind_setup.py relies on.

Run: /usr/bin/python3 -m pytest -q hack/tests/test_shell_commands.py
"""

from shell_commands import commands, defined_functions


def test_first_words_of_pipelines_lists_and_substitutions():
    script = 'x=$(go env GOPATH | cut -d: -f1) && grep -q a "$f" || sha256sum "$(basename "$f")"\n'
    assert set(commands(script)) == {"go", "cut", "grep", "sha256sum", "basename"}


def test_heredoc_bodies_quotes_and_comments_are_not_commands():
    script = (
        "cat >f <<EOF\nkind: Cluster\nnodes: [a]\nEOF\n"
        "jq '.a | select(.b)' f # docker is only a word here\n"
        "echo \"mmdebstrap ; curl\"\n"
    )
    assert set(commands(script)) == {"cat", "jq", "echo"}


def test_case_patterns_arrays_tests_arithmetic_and_redirections():
    script = (
        'case "$1" in\n  up) cmd_up ;;\n  -h | --help) usage ;;\n  *) die "no" ;;\nesac\n'
        "args=(--wait 180s)\n"
        '[[ $n =~ ^[a-z]([a-z-]*)$ ]] || fail "bad"\n'
        "for ((k = 0; k < 4; k++)); do docker network rm x >/dev/null 2>&1 || true; done\n"
        "echo oops >&2\n"
        "case $rel in torch/* | \"$x\"/*) continue ;; esac\n"
    )
    assert set(commands(script)) == {"cmd_up", "usage", "die", "fail", "docker", "true", "echo", "continue"}


def test_commands_in_a_multiline_substitution_and_braces():
    script = 'sum=$({\n  echo "$V"\n  cat "$0"\n} | sha256sum | cut -c1-12)\n'
    assert set(commands(script)) == {"echo", "cat", "sha256sum", "cut"}


def test_assignments_and_keywords_before_the_command():
    script = "if ! GOBIN=/x go install y; then\n  FOO=1 BAR=2 mmdebstrap a b\nfi\nlocal a=1\n"
    assert set(commands(script)) == {"go", "mmdebstrap", "local"}


def test_defined_functions():
    assert defined_functions("a() {\n}\nfunction b_c() {\n}\n  d-e() { :; }\n") == {"a", "b_c", "d-e"}
