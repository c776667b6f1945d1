-- The resident's per-exec round trip (bench/README.md "resident"). Run from the repository root:
--
--   lua5.4 bench/resident_bench.lua [N=300] [ROUNDS=5]
--
-- Starts the real `switchboard resident` on loopback, onboards a local bare repository over a
-- file:// URL, and runs N sequential `true` through the local executor (in this process) and
-- through the resident executor (attach once, then executor → resident → the thread's worktree),
-- alternating per round. One JSON document on stdout: the medians and the ratio to local.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local R = require("support.resident")
local policy = require("switchboard.policy")
local resident = require("switchboard.exec.resident")
local localx = require("switchboard.exec.local")

core.log_format("text", "warn")

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function round(x) return math.floor(x * 1000 + 0.5) / 1000 end

local n, rounds = tonumber(arg[1]) or 300, tonumber(arg[2]) or 5

core.run(function()
  local dir = R.policy_dir()
  assert(policy.load_initial(dir))
  local base = R.make_base()
  local h = R.start(base, { policies = dir })
  local status = core.http.request{ method = "POST", url = h.url .. "/onboard", body = '{"repo":"acme/api"}',
    headers = { authorization = "Bearer " .. R.TOKEN, ["content-type"] = "application/json" }, deadline_ms = 10000 }
  assert(status == 202)
  S.wait_for(function()
    local _, _, raw = core.http.request{ method = "GET", url = h.url .. "/status?repo=acme/api",
      headers = { authorization = "Bearer " .. R.TOKEN }, deadline_ms = 10000 }
    return raw and raw:find('"warm"')
  end, 60000)
  local root = S.tmpdir()
  local lx = localx.new{ root = root, thread_key = "bench", policy = policy.current }
  local rx = resident.new{ url = h.url, token = R.TOKEN, thread_key = "bench", repo = "acme/api", policy = policy.current }
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
  per_exec_ms(lx); per_exec_ms(rx) -- warm up both (the resident attaches here)
  local loc, res = {}, {}
  for r = 1, rounds do
    loc[r] = per_exec_ms(lx)
    res[r] = per_exec_ms(rx)
  end
  h.stop("TERM"); h.wait()
  S.rm(root); S.rm(base); S.rm(h.root)
  local l, rr = median(loc), median(res)
  io.write(cjson.encode{ n = n, rounds = rounds, local_ms = round(l), resident_ms = round(rr),
    added_ms = round(rr - l), ratio = round(rr / l) }, "\n")
end)
