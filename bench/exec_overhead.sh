#!/usr/bin/env bash
# Per-exec overhead (issue 2): the engine and the local executor against posix_spawn+waitpid
# (the raw call) and Node's child_process.execFile (the earlier system), in one run.
# Usage: bench/exec_overhead.sh [N per round] [rounds]   (after scripts/bootstrap)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-300}" rounds="${2:-7}"
build="${SB_BUILD_DIR:-build}"
cmake --build "$build" --target bench_raw_spawn switchboard_core >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Interleave the contenders round by round so background noise hits them alike.
for ((r = 0; r < rounds; r++)); do
  "$build/bench/bench_raw_spawn" "$n" 1 >>"$out/raw"
  SB_BUILD_DIR="$build" lua5.4 -e "package.path='./lua/?.lua;./lua/?/init.lua;'..package.path; package.cpath='$build/lua/?.so;'..package.cpath" \
    bench/exec_overhead.lua "$n" 1 >>"$out/engine_all"
  if command -v node >/dev/null; then node bench/exec_node.js "$n" 1 >>"$out/node"; fi
done
grep '^engine' "$out/engine_all" | awk '{print $2}' >"$out/engine"
grep '^local' "$out/engine_all" | awk '{print $2}' >"$out/local"
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
raw=$(median "$out/raw"); engine=$(median "$out/engine"); loc=$(median "$out/local")
printf 'per-exec median over %d rounds of %d `bash -c true`:\n' "$rounds" "$n"
printf '  raw posix_spawn+waitpid   %8.1f µs\n' "$raw"
printf '  engine core.spawn         %8.1f µs   %.3f× raw\n' "$engine" "$(echo "$engine / $raw" | bc -l)"
printf '  local executor            %8.1f µs   %.3f× raw\n' "$loc" "$(echo "$loc / $raw" | bc -l)"
if [ -s "$out/node" ]; then
  node=$(median "$out/node")
  printf '  node execFile             %8.1f µs   %.3f× raw; local executor is %.2f× faster\n' \
    "$node" "$(echo "$node / $raw" | bc -l)" "$(echo "$node / $loc" | bc -l)"
fi
