-- Per-exec round trip of the remote backends against the local executor, in the same run
-- (bench/README.md "Backends"). Run from the repository root after a build:
--
--   lua5.4 bench/e2b_bench.lua [N=200] [ROUNDS=5]
--
-- N sequential `true` per round through each of: the local executor (this process), the
-- sandbox executor → a real `switchboard sandboxd` on loopback, and the e2b executor → the E2B
-- stand-in (tests/support/e2b_standin.py, its split delay off) on loopback — alternating per
-- round so that noise hits all alike. Per round the median per-exec time of each; medians of
-- those are reported, with each remote backend's ratio to local and its added milliseconds,
-- and the CPU this process spent per exec on each (the executor's own cost: the peers and the
-- commands are other processes).
-- One JSON document on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local E = require("support.e2b")
local policy = require("switchboard.policy")
-- the backends' and fronts' settings in the policy schema, as the binary loads them
require("switchboard.exec.backends")
require("switchboard.fronts.registry")

core.log_format("text", "warn")

local median = require("bench.stats").median

local function round(x, digits)
  local m = 10 ^ (digits or 3)
  return math.floor(x * m + 0.5) / m
end

-- CPU time this process has used (user + system), ms: what the executor itself costs, apart
-- from the peer's time (the sandboxd, the stand-in and the commands are other processes).
local TICK_MS = 10 -- USER_HZ = 100 on Linux
local function cpu_ms()
  local f = assert(io.open("/proc/self/stat"))
  local s = f:read("a")
  f:close()
  local fields = {}
  for x in s:match("%) (.*)"):gmatch("%S+") do fields[#fields + 1] = x end
  return (tonumber(fields[12]) + tonumber(fields[13])) * TICK_MS
end

local function main(n, rounds)
  n, rounds = tonumber(n) or 200, tonumber(rounds) or 5
  assert(policy.load_initial())
  local snap_fn = policy.current
  local server = S.start_sandboxd{}
  assert(server.port, "sandboxd did not start:\n" .. server.log())
  local standin = E.start{ split_delay_ms = 0 }
  local root = S.tmpdir()
  local execs = {
    ["local"] = require("switchboard.exec.local").new{ root = root, thread_key = "bench", policy = snap_fn },
    sandbox = require("switchboard.exec.sandbox").new{ url = server.url, token = S.TOKEN, thread_key = "bench", policy = snap_fn },
    e2b = E.executor(standin, { policy = snap_fn, thread_key = "bench" }),
  }
  local order = { "local", "sandbox", "e2b" }
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
  for _, name in ipairs(order) do per_exec_ms(execs[name]) end -- warm up (creates the sandbox)
  local per = { ["local"] = {}, sandbox = {}, e2b = {} }
  local cpu = { ["local"] = 0, sandbox = 0, e2b = 0 }
  for r = 1, rounds do
    for _, name in ipairs(order) do
      local c0 = cpu_ms()
      per[name][r] = per_exec_ms(execs[name])
      cpu[name] = cpu[name] + cpu_ms() - c0
    end
  end
  execs.e2b:release("always")
  server:stop("TERM"); server:wait(); S.rm(server.root)
  standin:stop()
  S.rm(root)
  local loc = median(per["local"])
  local out = { n = n, rounds = rounds, local_ms = round(loc),
                local_client_cpu_ms = round(cpu["local"] / (n * rounds)) }
  for _, name in ipairs({ "sandbox", "e2b" }) do
    local m = median(per[name])
    out[name .. "_ms"] = round(m)
    out[name .. "_ratio"] = round(m / loc, 2)
    out[name .. "_added_ms"] = round(m - loc)
    out[name .. "_client_cpu_ms"] = round(cpu[name] / (n * rounds))
  end
  return out
end

print(cjson.encode(core.run(main, ...)))
