-- Per-exec overhead of the engine: N sequential `bash -c true`, through core.spawn alone and
-- through the local executor (policy snapshot, budget, environment, workspace, rendering).
-- Prints "engine <µs>" and "local <µs>" lines, one per round (mean µs per exec).
local core = require("switchboard.core")
local policy = require("switchboard.policy")
-- the backends' and fronts' settings in the policy schema, as the binary loads them
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local local_executor = require("switchboard.exec.local")

local n, rounds = tonumber(arg[1] or 200), tonumber(arg[2] or 5)
local root = os.tmpname()
os.remove(root)

core.run(function()
  local env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
  -- The same environment as the references: bash itself starts slower with a long PATH and a
  -- UTF-8 locale, which is bash's cost, not the engine's.
  local ex = local_executor.new{
    root = root, thread_key = "bench", policy = policy.shipped,
    getenv = function(name) return env[name] end,
  }
  ex:exec("true") -- creates the workspace
  for _ = 1, rounds do
    local t0 = core.now_ms()
    for _ = 1, n do core.spawn{ argv = { "bash", "-c", "true" }, env = env }:wait() end
    print(("engine %.1f"):format((core.now_ms() - t0) * 1000 / n))
    t0 = core.now_ms()
    for _ = 1, n do ex:exec("true") end
    print(("local %.1f"):format((core.now_ms() - t0) * 1000 / n))
  end
  core.fs.remove_tree(root)
end)
