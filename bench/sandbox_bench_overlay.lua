-- The policy overlay of bench/sandbox_bench.lua concurrent (bench/README.md "sandboxd"); its own
-- file so that the suite's smoke tier (tests/e2e/bench_smoke_spec.lua) checks it at full size.
local M = {}

-- The concurrent bench's own policy overlay: the server as deployed for COMMANDS clients that all
-- come from 127.0.0.1 — the shipped per-peer cap (1,024) would refuse the rest, and the bench
-- would measure refusals instead of the server (issue 28). Each instance's walls are small (the
-- commands are `sleep`), so that a fleet of thousands fits the host's file table
-- (policies/isolation.lua fleet_files_percent).
function M.concurrent_overlay(commands, heartbeat_ms)
  return table.concat({
    ("sandbox.heartbeat_ms = %d"):format(heartbeat_ms),
    ("server.max_connections = %d"):format(commands + 64),
    ("server.max_connections_per_peer = %d"):format(commands + 64),
  }, "\n")
end
-- Their workspaces are small too: each image holds its whole size of the host's disk
-- (docs/isolation.md "The host's disk"), and thousands of 2 GiB images would not fit.
M.CONCURRENT_ISOLATION = "open_files = 64\npids_max = 16\nfleet_files_percent = 90\nspare_instances = 0\n"
  .. ("workspace_max_bytes = %d * MiB"):format(tonumber(os.getenv("SB_BENCH_WORKSPACE_MIB")) or 16)
-- (SB_BENCH_WORKSPACE_MIB: smaller images where the host's disk cannot hold 2,000 × 16 MiB)
-- Measuring a checkout from before fleet_files_percent existed (bench/paired.lua on main's build):
-- its schema refuses the key, and it has no file-table check to satisfy.
if os.getenv("SB_BENCH_LEGACY_POLICY") == "1" then M.CONCURRENT_ISOLATION = "spare_instances = 0" end

return M
