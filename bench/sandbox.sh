#!/usr/bin/env bash
# sandboxd benchmarks (bench/README.md "sandboxd"): each mode REPEAT times, medians reported.
# Usage: bench/sandbox.sh [REPEAT=5] [modes...]   modes: roundtrip throughput concurrent
#        (default: all three; concurrent runs 2,000 × `sleep 20`, so about 25 s per repeat)
set -euo pipefail
cd "$(dirname "$0")/.."
repeat="${1:-5}"; shift || true
modes=("$@"); [ ${#modes[@]} -gt 0 ] || modes=(roundtrip throughput concurrent)
build="${SB_BUILD_DIR:-build}"
cmake --build "$build" --target switchboard switchboard_core bench_sandbox_raw8 >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for mode in "${modes[@]}"; do
  for ((r = 0; r < repeat; r++)); do
    SB_BUILD_DIR="$build" SWITCHBOARD_BIN="$build/switchboard" lua5.4 bench/sandbox_bench.lua "$mode" \
      | tee -a "$out/$mode" >&2
  done
done
# Medians of each numeric field, per mode.
lua5.4 - "$out" "${modes[@]}" <<'LUA'
local cjson = require("cjson")
local dir = arg[1]
for i = 2, #arg do
  local mode, rows = arg[i], {}
  for line in io.lines(dir .. "/" .. mode) do rows[#rows + 1] = cjson.decode(line) end
  local keys = {}
  for k, v in pairs(rows[1]) do if type(v) == "number" then keys[#keys + 1] = k end end
  table.sort(keys)
  io.write(("%s (median of %d):\n"):format(mode, #rows))
  for _, k in ipairs(keys) do
    local xs = {}
    for _, r in ipairs(rows) do xs[#xs + 1] = r[k] end
    table.sort(xs)
    local n = #xs
    local m = n % 2 == 1 and xs[(n + 1) // 2] or (xs[n // 2] + xs[n // 2 + 1]) / 2
    io.write(("  %-28s %s\n"):format(k, m))
  end
end
LUA
