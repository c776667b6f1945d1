-- The walls' cost (bench/README.md "Walls"), walled against unwalled in the same run: two real
-- sandboxd servers (one started with --no-walls), the same requests alternating between them.
--
--   lua5.4 bench/walls_bench.lua [N=40] [ALIVE=200]
--
-- first:     the first command of a new instance (a thread key never seen): `true`
-- follow-up: a later command of an awake instance: `true`
-- alive:     ALIVE instances awake at once on the walled server (each with a `sleep` running),
--            then the server's RSS (VmRSS of the sandboxd process)
-- Goals (issue 10): follow-up ≤ 1.2× unwalled; first ≤ unwalled + 30 ms; 200 alive with RSS
-- ≤ 64 MiB. One JSON document on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")

core.log_format("text", "warn")

local N, ALIVE = tonumber(arg[1]) or 40, tonumber(arg[2]) or 200

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

local out = {}
core.run(function()
  local dir = S.policy_dir(S.FAST .. 'sandbox.sleep_after = "10m"\n')
  local walled = S.start_sandboxd{ policies = dir, args = { "--max-instances", tostring(ALIVE + 2 * N + 10) } }
  local bare = S.start_sandboxd{ policies = dir, args = { "--no-walls", "--max-instances", tostring(2 * N + 10) } }
  local first = { walled = {}, bare = {} }
  local follow = { walled = {}, bare = {} }
  for i = 1, N do
    for _, pair in ipairs({ { "walled", walled }, { "bare", bare } }) do
      local name, h = pair[1], pair[2]
      local key = ("bench-%d"):format(i)
      first[name][#first[name] + 1] = timed_exec(h, key, "true")
      for _ = 1, 5 do
        follow[name][#follow[name] + 1] = timed_exec(h, key, "true")
      end
    end
  end
  out.first_walled_ms = round(median(first.walled))
  out.first_unwalled_ms = round(median(first.bare))
  out.first_extra_ms = round(out.first_walled_ms - out.first_unwalled_ms)
  out.follow_walled_ms = round(median(follow.walled))
  out.follow_unwalled_ms = round(median(follow.bare))
  out.follow_ratio = round(out.follow_walled_ms / out.follow_unwalled_ms)
  -- ALIVE instances awake at once, each with a process running in it
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
  out.bare_rss_mib = round(rss_kib(bare.pid) / 1024)
  walled:stop("TERM"); bare:stop("TERM")
  walled:wait(); bare:wait()
  S.cleanup_servers()
end)
S.cleanup()
io.write(cjson.encode(out), "\n")
