-- sandboxd benchmarks (bench/README.md "sandboxd"). Run from the repository root:
--
--   lua5.4 bench/sandbox_bench.lua roundtrip  [N=300] [ROUNDS=5]
--   lua5.4 bench/sandbox_bench.lua throughput [SLICE_S=2] [CLIENTS=8] [PAIRS=7]
--   lua5.4 bench/sandbox_bench.lua concurrent [COMMANDS=2000] [SLEEP_S=20] [HEARTBEAT_MS=1000]
--
-- Each mode starts the real `switchboard sandboxd` (SWITCHBOARD_BIN, default ./build/switchboard)
-- on loopback and measures against a reference taken in the same run: the local executor
-- (roundtrip) or bench_sandbox_raw8 (throughput). One JSON document per mode on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local policy = require("switchboard.policy")
local sandbox = require("switchboard.exec.sandbox")
local localx = require("switchboard.exec.local")

core.log_format("text", "warn")

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function round(x, digits)
  local m = 10 ^ (digits or 3)
  return math.floor(x * m + 0.5) / m
end

local snap_fn = policy.current

local function start(extra_timeouts, args, extra_isolation)
  local dir = extra_timeouts and S.policy_dir(extra_timeouts) or nil
  if extra_isolation then
    dir = policies.dir{
      timeouts = function(src) return src .. "\n" .. extra_timeouts .. "\n" end,
      isolation = function(src) return src .. "\n" .. extra_isolation .. "\n" end,
    }
  end
  if dir then assert(policy.load_initial(dir)) else assert(policy.load_initial()) end
  local h = S.start_sandboxd{ policies = dir, args = args }
  assert(h.port, "sandboxd did not start:\n" .. h.log())
  return h
end

local function stop(h)
  h:stop("TERM")
  h:wait()
  S.rm(h.root)
end

local MODES = {}
local M = dofile("bench/sandbox_bench_overlay.lua")

-- Sequential `true`: the local executor in this process against executor → sandboxd.
function MODES.roundtrip(n, rounds)
  n, rounds = tonumber(n) or 300, tonumber(rounds) or 5
  local h = start()
  local root = S.tmpdir()
  local lx = localx.new{ root = root, thread_key = "bench", policy = snap_fn }
  local sx = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "bench", policy = snap_fn }
  local function per_exec_ms(ex)
    local times = {}
    for i = 1, n do
      local t0 = core.now_ms()
      local r = assert(ex:exec("true"))
      assert(r.exit_code == 0)
      times[i] = core.now_ms() - t0
    end
    return median(times)
  end
  per_exec_ms(lx); per_exec_ms(sx) -- warm up both
  local loc, sbx, added = {}, {}, {}
  for r = 1, rounds do
    loc[r] = per_exec_ms(lx)
    sbx[r] = per_exec_ms(sx)
    added[r] = sbx[r] - loc[r]
  end
  stop(h)
  S.rm(root)
  return {
    mode = "roundtrip", n = n, rounds = rounds,
    local_ms = round(median(loc)), sandbox_ms = round(median(sbx)), added_ms = round(median(added)),
    added_per_round_ms = (function() local t = {} for i, x in ipairs(added) do t[i] = round(x) end return t end)(),
    goal_added_ms = 0.3,
  }
end

local function raw_rate(clients, seconds)
  local p = assert(core.spawn{ argv = { build .. "/bench/bench_sandbox_raw8", tostring(clients), tostring(seconds) },
    env = S.base_env() })
  local r = p:wait()
  return tonumber(r.stdout)
end

-- CLIENTS executors at once, each running `true` back to back, against the raw limit: PAIRS
-- interleaved slices of SECONDS each (raw, the local executor, then executor → sandboxd), so
-- that noise from the rest of the machine hits all alike; ratios are taken per slice group and
-- the medians reported. The local executor (the engine's spawn path with no HTTP) shows the
-- ceiling the engine itself puts on any server built on it.
function MODES.throughput(seconds, clients, pairs_n)
  seconds, clients, pairs_n = tonumber(seconds) or 2, tonumber(clients) or 8, tonumber(pairs_n) or 7
  local h = start()
  local execs = {}
  for c = 1, clients do
    execs[c] = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "client-" .. c, policy = snap_fn }
    assert(execs[c]:exec("true")) -- wake every instance before measuring
  end
  local root = S.tmpdir()
  local locals = {}
  for c = 1, clients do
    locals[c] = localx.new{ root = root, thread_key = "client-" .. c, policy = snap_fn }
  end
  local function rate_of(list)
    local count, errors_seen, finished = 0, 0, 0
    local me = core.current()
    local t0 = core.now_ms()
    local t_end = t0 + seconds * 1000
    for c = 1, clients do
      core.go(function()
        while core.now_ms() < t_end do
          local r = list[c]:exec("true")
          if r and r.exit_code == 0 then count = count + 1 else errors_seen = errors_seen + 1 end
        end
        finished = finished + 1
        if finished == clients then core.wake(me) end
      end)
    end
    core.suspend()
    return count / ((core.now_ms() - t0) / 1000), errors_seen
  end
  local raws, locs, sbs, ratios, local_ratios, errs = {}, {}, {}, {}, {}, 0
  for i = 1, pairs_n do
    raws[i] = raw_rate(clients, seconds)
    locs[i] = rate_of(locals)
    local rate, e = rate_of(execs)
    sbs[i], errs = rate, errs + e
    ratios[i] = sbs[i] / raws[i]
    local_ratios[i] = locs[i] / raws[i]
  end
  stop(h)
  S.rm(root)
  return {
    mode = "throughput", clients = clients, slice_s = seconds, pairs = pairs_n, errors = errs,
    sandbox_per_s = round(median(sbs), 1), raw_per_s = round(median(raws), 1),
    ratio = round(median(ratios)), goal_ratio = 0.8,
    -- the engine's own ceiling: the local executor, CLIENTS at once in this process, no HTTP
    local_per_s = round(median(locs), 1), local_ratio = round(median(local_ratios)),
  }
end

local function rss_kib(pid, field)
  local s = S.read("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match(field .. ":%s*(%d+) kB"))
end

-- The server log's first lines from the walls helper or bwrap, and its first warning or error:
-- where an instance that could not be built says why.
local function first_problem(log)
  local lines = {}
  for line in log:gmatch("[^\n]+") do
    if #lines < 8 and (line:find("^bwrap:") or line:find("^walls:") or line:find("^%S+ error ")
      or line:find("^%S+ warn ")) then
      lines[#lines + 1] = line:sub(1, 400)
    end
  end
  return table.concat(lines, "\n")
end

-- COMMANDS concurrent `sleep SLEEP_S` in one server: its RSS (children excluded: they are other
-- processes), the longest gap between heartbeats any client saw, and that all complete.
function MODES.concurrent(commands, sleep_s, heartbeat_ms)
  commands, sleep_s, heartbeat_ms = tonumber(commands) or 2000, tonumber(sleep_s) or 20, tonumber(heartbeat_ms) or 1000
  local h = start(M.concurrent_overlay(commands, heartbeat_ms), { "--max-instances", tostring(commands) },
    M.CONCURRENT_ISOLATION)
  local idle_rss = rss_kib(h.pid, "VmRSS")
  local me = core.current()
  local done, ok, max_gap, max_first, failures = 0, 0, 0, 0, {}
  local peak_rss = 0
  local sampling = true
  core.go(function()
    while sampling do
      peak_rss = math.max(peak_rss, rss_kib(h.pid, "VmRSS") or 0)
      core.sleep(250)
    end
  end)
  local t_start = core.now_ms()
  for i = 1, commands do
    core.go(function()
      local times = {}
      local t0 = core.now_ms()
      local status, _, body = S.call(h.url, "/exec", {
        thread = "c" .. i, body = { command = "sleep " .. sleep_s }, deadline_ms = (sleep_s + 300) * 1000, -- thousands of instances start on a busy host first
        on_chunk = function() times[#times + 1] = core.now_ms() end,
      })
      local doc = status == 200 and cjson.decode(body) or nil
      if doc and doc.exitCode == 0 then ok = ok + 1 else failures[#failures + 1] = tostring(status) .. " " .. tostring(body) end
      for j = 2, #times do max_gap = math.max(max_gap, times[j] - times[j - 1]) end
      if times[1] then max_first = math.max(max_first, times[1] - t0) end
      done = done + 1
      if done == commands then core.wake(me) end
    end)
  end
  core.suspend()
  local wall = core.now_ms() - t_start
  sampling = false
  local hwm = rss_kib(h.pid, "VmHWM")
  stop(h)
  return {
    mode = "concurrent", commands = commands, sleep_s = sleep_s, heartbeat_ms = heartbeat_ms,
    completed = ok, failures = #failures, first_failure = failures[1],
    -- a failure's cause is often only in the server's log (bwrap's own message is there)
    first_failure_log = failures[1] and first_problem(h.log()) or nil,
    server_rss_idle_mib = round((idle_rss or 0) / 1024, 1), server_rss_peak_mib = round(peak_rss / 1024, 1),
    server_vmhwm_mib = round((hwm or 0) / 1024, 1), goal_rss_mib = 64,
    longest_heartbeat_gap_ms = round(max_gap, 1), goal_gap_ms = heartbeat_ms + 1000,
    longest_first_byte_ms = round(max_first, 1), wall_s = round(wall / 1000, 2),
  }
end

local mode = arg[1] or "roundtrip"
assert(MODES[mode], "mode: roundtrip | throughput | concurrent")
local result = core.run(function() return MODES[mode](table.unpack(arg, 2)) end)
print(cjson.encode(result))
S.cleanup()
