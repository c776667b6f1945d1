#!/usr/bin/env bash
# Issue 43's table, every row RUNS times back to back (bench/README.md "Issue 43's rows").
#
#   bench/issue43.sh [RUNS=3]
#
# Each run: bench/paired.lua (sandboxd, --no-walls, the floor, Node, raw: the per-request, Node,
# 8-client and 1 MB rows), bench/sandbox_bench.lua threads500 (500 × `sleep 10`, 60 s) and
# concurrent 2000 20 1000 (5 min; RSS and loop lag from /metrics), the load average beside each.
# Prints one markdown table (a column per run and binary, the goal, met or not per cell, how many
# runs met it) and keeps the raw JSON lines in a file (its path is printed; bench/issue43_table.lua
# FILE prints the table again).
#
# Environment:
#   SWITCHBOARD_BINS   sandboxd binaries measured, space-separated, taken in turn within each run
#                      (main's build against a branch's: alternated, so the load hits both alike);
#                      default SWITCHBOARD_BIN, else SB_BUILD_DIR/switchboard
#   SB_BUILD_DIR       this checkout's build (bench_paired, bench_floor_server, core.so); build
#   ISSUE43_OUT        the JSON lines file (default: a new file under /tmp)
#   ISSUE43_PAIRED     paired.lua's SEQ_N SLICE_S PAIRS BIG_N (default "300 2 5 20")
#   ISSUE43_THREADS    threads500's thread count (default 500; 0 skips it)
#   ISSUE43_CONC       the concurrent row's thread count (default 2000; 0 skips it)
#   SB_BENCH_NO_BUILD  1: use the builds as they are (default: build the bench's targets first)
#   LUA                the Lua interpreter command (default lua5.4)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
build="${SB_BUILD_DIR:-build}"
bins="${SWITCHBOARD_BINS:-${SWITCHBOARD_BIN:-$build/switchboard}}"
paired_args="${ISSUE43_PAIRED:-300 2 5 20}"
threads="${ISSUE43_THREADS:-500}"
conc="${ISSUE43_CONC:-2000}"
lua="${LUA:-lua5.4}"
out="${ISSUE43_OUT:-$(mktemp /tmp/issue43.XXXXXX.jsonl)}"
: >"$out"
if [ "${SB_BENCH_NO_BUILD:-0}" != 1 ]; then
  cmake --build "$build" --target switchboard switchboard_core bench_paired bench_floor_server >/dev/null
fi
for bin in $bins; do
  [ -x "$bin" ] || { echo "issue43.sh: no binary at $bin" >&2; exit 2; }
done

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# part NAME BIN RUN COMMAND...: one JSON line {run, bin, part, load_before, load_after, result}
# (result null, and the output's tail as error, when the bench printed no JSON line)
part() {
  local name="$1" bin="$2" run="$3"
  shift 3
  local before text line
  before="$(loadavg)"
  text="$(SB_BUILD_DIR="$build" SWITCHBOARD_BIN="$bin" "$@" 2>&1)" || true
  line="$(printf '%s\n' "$text" | grep '^{' | tail -n 1)" || true
  if [ -n "$line" ]; then
    printf '{"run":%d,"bin":"%s","part":"%s","load_before":"%s","load_after":"%s","result":%s}\n' \
      "$run" "$bin" "$name" "$before" "$(loadavg)" "$line" >>"$out"
  else
    printf '%s\n' "$text" | tail -n 5 >&2
    $lua - "$run" "$bin" "$name" "$before" "$(loadavg)" "$(printf '%s\n' "$text" | tail -c 400)" >>"$out" <<'LUA'
local cjson = require("cjson")
io.write(cjson.encode{ run = tonumber(arg[1]), bin = arg[2], part = arg[3], load_before = arg[4],
  load_after = arg[5], error = arg[6] }, "\n")
LUA
  fi
  echo "issue43.sh: run $run, $name, $bin: done (load $(loadavg))" >&2
}

for ((r = 1; r <= runs; r++)); do
  for bin in $bins; do
    # shellcheck disable=SC2086 # paired_args is four numbers
    part paired "$bin" "$r" $lua bench/paired.lua $paired_args 0
    if [ "$threads" -gt 0 ]; then part threads500 "$bin" "$r" $lua bench/sandbox_bench.lua threads500 "$threads"; fi
    if [ "$conc" -gt 0 ]; then part concurrent "$bin" "$r" $lua bench/sandbox_bench.lua concurrent "$conc" 20 1000; fi
  done
done
$lua bench/issue43_table.lua "$out"
echo
echo "raw JSON lines: $out"
