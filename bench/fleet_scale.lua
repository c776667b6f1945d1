-- Work on sandboxd's loop that grows with the fleet (issue 43 item 4; bench/README.md "Fleet-sized
-- work on the loop (s6-misc)"). Run from the repository root:
--
--   lua5.4 bench/fleet_scale.lua [N=300] [SLEEP_S=15] [LUA_DIRS=lua]
--
-- For each Lua tree of the comma-separated LUA_DIRS (each a directory holding switchboard/…,
-- with policies/ beside it — an older checkout's, to compare; the same binary runs them all,
-- through SWITCHBOARD_LUA_DIR), in turn, one walled sandboxd (the concurrent bench's overlay:
-- 16 MiB workspaces, no spares; idle sleep after 10 s, past the burst's length) and three phases:
--   burst   N threads at once, each `true`: N instances start
--   steady  the same N threads at once, each `sleep SLEEP_S`: heartbeats every second
--   sleeps  every instance goes idle and sleeps (each sleep compacts its image and runs the
--           slept workspaces' keeper)
-- Per phase: sandboxd's own CPU (the sum of its threads' /proc/PID/task/*/schedstat run time;
-- its children are other processes), its wall time, and the loop lag gauges of its /metrics
-- scraped at the phase's end (each covers the last minute), with the host's load beside them.
-- One JSON document per Lua tree on stdout; SB_FLEET_PERF=DIR records `perf record -g` of
-- sandboxd (and the children it starts meanwhile) for each phase into DIR/<tree>-<phase>.data.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local cpu_ns = require("bench.stats").cpu_ns

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local policy = require("switchboard.policy")
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local overlay = dofile("bench/sandbox_bench_overlay.lua")

core.log_format("text", "warn")

local function round(x, digits)
  local m = 10 ^ (digits or 1)
  return math.floor(x * m + 0.5) / m
end

local function load1() return tonumber((S.read("/proc/loadavg") or ""):match("^(%S+)")) end

local function scrape(h)
  local status, _, body = S.call(h.url, "/metrics", { method = "GET", thread = false, deadline_ms = 30000 })
  if status ~= 200 then return {} end
  local function g(q) return tonumber(body:match('switchboard_loop_lag_seconds{quantile="' .. q .. '"} (%S+)')) end
  return { p50 = g("0.5"), p99 = g("0.99"), max = g("1") }
end

-- N threads at once, each running `command`; → completed count.
local function wave(h, n, command, deadline_ms)
  local me, done, ok = core.current(), 0, 0
  for i = 1, n do
    core.go(function()
      local status, _, body = S.call(h.url, "/exec", { thread = "f" .. i, body = { command = command },
        deadline_ms = deadline_ms })
      local doc = status == 200 and cjson.decode(body) or nil
      if doc and doc.exitCode == 0 then ok = ok + 1 end
      done = done + 1
      if done == n then core.wake(me) end
    end)
  end
  core.suspend()
  return ok
end

local function perf_start(pid, path)
  if not path then return nil end
  return assert(core.spawn{ argv = { "perf", "record", "-g", "-F", "499", "-p", tostring(pid), "-o", path },
    max_output = 1 << 20 })
end

local function perf_stop(proc)
  if not proc then return end
  proc:kill("INT")
  proc:wait()
end

-- One phase: fn() run with sandboxd's CPU, wall time, load and lag around it.
local function phase(h, name, perf_dir, tree, fn)
  io.stderr:write(("fleet_scale: %s: %s\n"):format(tree, name))
  local rec = perf_start(h.pid, perf_dir and ("%s/%s-%s.data"):format(perf_dir, tree, name))
  local cpu0, t0, load0 = cpu_ns(h.pid), core.now_ms(), load1()
  local log0 = #h.log()
  local result = fn()
  local wall = core.now_ms() - t0
  local cpu = cpu_ns(h.pid) - cpu0
  perf_stop(rec)
  local lag = scrape(h)
  -- the file-table watch's counts in the phase (sandboxd/file_table.lua): each walks every
  -- awake instance's processes
  local counts, counted, count_ms = 0, 0, 0
  for line in h.log():sub(log0 + 1):gmatch("[^\n]*sandboxd%.file_table_counted[^\n]*") do
    counts = counts + 1
    counted = counted + (tonumber(line:match("instances=(%d+)")) or 0)
    count_ms = count_ms + (tonumber(line:match("count_ms=(%d+)")) or 0)
  end
  return { phase = name, result = result, wall_s = round(wall / 1000, 2), cpu_ms = round(cpu / 1e6, 1),
    file_table_counts = counts, file_table_instances_counted = counted, file_table_count_ms = count_ms,
    lag_p50_ms = lag.p50 and round(lag.p50 * 1000), lag_p99_ms = lag.p99 and round(lag.p99 * 1000),
    lag_max_ms = lag.max and round(lag.max * 1000), load1_before = load0, load1_after = load1() }
end

local function run(n, sleep_s, lua_dir, perf_dir)
  local timeouts = overlay.concurrent_overlay(n, 1000) .. "\nsandbox.sleep_after = \"10s\""
  local dir = policies.dir{
    timeouts = function(src) return src .. "\n" .. timeouts .. "\n" end,
    isolation = function(src) return src .. "\n" .. overlay.CONCURRENT_ISOLATION .. "\n" end,
  }
  assert(policy.load_initial(dir))
  local env = lua_dir ~= "lua" and { SWITCHBOARD_LUA_DIR = lua_dir } or nil
  local h = S.start_sandboxd{ policies = dir, args = { "--max-instances", tostring(n) }, env = env }
  local tree = lua_dir:gsub("[^%w]", "_")
  local phases = {}
  phases[1] = phase(h, "burst", perf_dir, tree, function() return wave(h, n, "true", 600000) end)
  phases[2] = phase(h, "steady", perf_dir, tree, function()
    return wave(h, n, "sleep " .. sleep_s, (sleep_s + 300) * 1000)
  end)
  local function slept() return select(2, h.log():gsub("sandboxd%.instance_slept", "")) end
  local slept_before = slept() -- (none, unless the host held a burst past sleep_after)
  phases[3] = phase(h, "sleeps", perf_dir, tree, function()
    -- every instance idle now: each sleeps 10 s after its last command (its image compacted,
    -- the keeper's pass after it); done when the server has logged N more sleeps
    S.wait_for(function() return slept() - slept_before >= n end, 600000)
    return slept() - slept_before
  end)
  phases[3].slept_before = slept_before
  h:stop("TERM")
  h:wait()
  S.rm(h.root)
  return { lua_dir = lua_dir, n = n, phases = phases }
end

local n, sleep_s = tonumber(arg[1]) or 300, tonumber(arg[2]) or 15
local dirs = {}
for d in (arg[3] or "lua"):gmatch("[^,]+") do dirs[#dirs + 1] = d end
local ok, err = pcall(core.run, function()
  for _, d in ipairs(dirs) do
    print(cjson.encode(run(n, sleep_s, d, os.getenv("SB_FLEET_PERF"))))
    io.stdout:flush()
  end
end)
S.cleanup_servers() -- a server a failed run left is killed, not orphaned
S.cleanup() -- the policy overlays
assert(ok, err)
