-- The walls' cost (bench/README.md "Walls"), walled against unwalled in the same run: real
-- sandboxd servers — walled (with its spare instance, policies/isolation.lua
-- spare_instances = 1), walled with spare_instances = 0 ("cold": every instance built on
-- demand), and one started with --no-walls — the same requests alternating between them.
--
--   lua5.4 bench/walls_bench.lua [N=40] [ALIVE=200]
--
-- first:     the first command (`true`) of a new instance (a thread key never seen). New threads
--            arrive apart, as they do: GAP_MS of idle before each round, so a spare taken by the
--            previous round has been rebuilt (on the cold server every instance is built).
-- follow-up: later commands (`true`) of awake instances, 5 rounds over the N instances, one
--            command per server in turn.
-- alive:     ALIVE instances awake at once on the walled server (each with a `sleep` running),
--            then the server's RSS (VmRSS of the sandboxd process)
-- Goals (issue 10): follow-up ≤ 1.2× unwalled; first ≤ unwalled + 30 ms; 200 alive with RSS
-- ≤ 64 MiB. One JSON document on stdout, with the load average before and after.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").loadavg

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

core.log_format("text", "warn")

local N, ALIVE = tonumber(arg[1]) or 40, tonumber(arg[2]) or 200
local GAP_MS, FOLLOWS = 150, 5

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function round(x) return math.floor(x * 100 + 0.5) / 100 end

local function timed_exec(h, thread, command)
  local t0 = core.now_ms()
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, body = { command = command }, deadline_ms = 120000 })
  local ms = core.now_ms() - t0
  assert(status == 200 and cjson.decode(raw).exitCode == 0, "exec failed: " .. tostring(raw))
  return ms
end

local function rss_kib(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s+(%d+)"))
end

local out = { load_before = loadavg() }
core.run(function()
  local timeouts = function(src) return src .. "\n" .. S.FAST .. 'sandbox.sleep_after = "10m"\n' end
  -- ALIVE + N instances must fit the host's file table (isolation fleet_files_percent): small walls
  -- …and their workspaces small: each image holds its whole size of the host's disk
  local small = "\npids_max = 32\nopen_files = 128\nworkspace_max_bytes = 16 * MiB\n"
  local dir = policies.dir{ timeouts = timeouts, isolation = function(src) return src .. small end }
  local cold_dir = policies.dir{ timeouts = timeouts,
    isolation = function(src) return src .. small .. "\nspare_instances = 0\n" end }
  local servers = {
    { "walled", S.start_sandboxd{ policies = dir, args = { "--max-instances", tostring(ALIVE + N + 10) } } },
    { "cold", S.start_sandboxd{ policies = cold_dir, args = { "--max-instances", tostring(N + 10) } } },
    { "bare", S.start_sandboxd{ policies = dir, args = { "--no-walls", "--max-instances", tostring(N + 10) } } },
  }
  local first, follow = {}, {}
  for _, s in ipairs(servers) do first[s[1]], follow[s[1]] = {}, {} end
  for i = 1, N do
    core.sleep(GAP_MS)
    for _, s in ipairs(servers) do
      table.insert(first[s[1]], timed_exec(s[2], ("bench-%d"):format(i), "true"))
    end
  end
  core.sleep(GAP_MS)
  for _ = 1, FOLLOWS do
    for i = 1, N do
      for _, s in ipairs(servers) do
        table.insert(follow[s[1]], timed_exec(s[2], ("bench-%d"):format(i), "true"))
      end
    end
  end
  local m = function(t, k) return round(median(t[k])) end
  out.first_walled_ms, out.first_cold_ms, out.first_unwalled_ms = m(first, "walled"), m(first, "cold"), m(first, "bare")
  out.first_extra_ms = round(out.first_walled_ms - out.first_unwalled_ms)
  out.first_cold_extra_ms = round(out.first_cold_ms - out.first_unwalled_ms)
  out.follow_walled_ms, out.follow_unwalled_ms = m(follow, "walled"), m(follow, "bare")
  out.follow_ratio = round(out.follow_walled_ms / out.follow_unwalled_ms)
  out.follow_cold_ratio = round(m(follow, "cold") / out.follow_unwalled_ms)
  -- ALIVE instances awake at once, each with a process running in it
  local walled = servers[1][2]
  local done, me = 0, core.current()
  for i = 1, ALIVE do
    core.go(function()
      timed_exec(walled, ("alive-%d"):format(i), "sleep 600 > /dev/null 2>&1 < /dev/null & true")
      done = done + 1
      if done == ALIVE then core.wake(me) end
    end)
  end
  core.suspend()
  local _, _, health = S.call(walled.url, "/healthz", { thread = false })
  out.alive = cjson.decode(health).instances.awake
  out.alive_rss_mib = round(rss_kib(walled.pid) / 1024)
  out.bare_rss_mib = round(rss_kib(servers[3][2].pid) / 1024)
  for _, s in ipairs(servers) do s[2]:stop("TERM") end
  for _, s in ipairs(servers) do s[2]:wait() end
  S.cleanup_servers()
end)
S.cleanup()
out.load_after = loadavg()
io.write(cjson.encode(out), "\n")
