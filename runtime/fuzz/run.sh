#!/usr/bin/env bash
# Runs every fuzz target for SECONDS from its seed corpus; fails on the first crash.
# Usage: runtime/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]   (default: every target below)
set -euo pipefail
build=$(realpath "$1")
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
cd "$build"
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_table fuzz_env fuzz_rendezvous fuzz_handshake fuzz_mesh_frame fuzz_http fuzz_nccl_handle fuzz_qp_address)
for target in "${targets[@]}"; do
  mkdir -p "corpus-$target"
  echo "fuzz: $target for ${seconds}s"
  # New inputs go to corpus-$target (first dir); the seeds in the tree are read, never written.
  if ! "./$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1 \
    "corpus-$target" "$here/corpus/$target" >"$target.log" 2>&1; then
    tail -40 "$target.log" >&2
    echo "fuzz: $target FAILED (log: $build/$target.log)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$target.log" | tr '\n' ' '
  echo
done
echo "fuzz: all targets ran ${seconds}s without a crash"
