# shellcheck shell=bash
# Small helpers shared by hack/testbed.sh and hack/local-cluster.sh. Source after setting PROG
# (the name used in messages).

PROG=${PROG:-$(basename "$0")}

log() { echo "$PROG: $*" >&2; }

# die MESSAGE: print to stderr and exit 2 (bad usage) — scripts use exit 1 for runtime failures.
die() {
  echo "$PROG: $*" >&2
  exit 2
}

fail() {
  echo "$PROG: $*" >&2
  exit 1
}

# is_uint VALUE: true for a non-empty string of decimal digits (no sign, no spaces).
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# uint_in_range FLAG VALUE MIN MAX: validate an integer flag value, die naming the flag.
uint_in_range() {
  local flag=$1 value=$2 min=$3 max=$4
  is_uint "$value" || die "$flag: want an integer in $min..$max, got '$value'"
  # 10# so values like 08 are decimal, not a bad octal.
  if ((10#$value < min || 10#$value > max)); then
    die "$flag: want an integer in $min..$max, got '$value'"
  fi
}

require_root() {
  [ "$(id -u)" -eq 0 ] || fail "$1 needs root (network namespaces, links, qdiscs)"
}

require_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || fail "missing command '$c' (run hack/setup.sh)"
  done
}

# require_tool COMMAND HOW: fail naming what installs COMMAND (HOW, e.g. "install the Debian
# package mmdebstrap") when it is not on PATH; for commands hack/setup.sh's default run does not
# install, where "run hack/setup.sh" would send the reader to a script that does not help.
require_tool() {
  command -v "$1" >/dev/null 2>&1 || fail "missing command '$1': $2"
}
