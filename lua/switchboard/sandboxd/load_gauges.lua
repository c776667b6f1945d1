-- sandboxd's gauges of its own load (docs/sandboxd.md "Metrics"): instance starts waiting for
-- a slot of the start gate (shell/walled.lua) and running, and the event loop's lag
-- (core.loop_lag, src/engine/loop_lag.c), the Lua heap and the Lua objects the process supervisor
-- made (core.proc_lua_objects), read when /metrics is scraped.
local core = require("switchboard.core")
local metrics = require("switchboard.metrics")
local walled = require("switchboard.shell.walled")

local M = {}

function M.register()
  core.loop_lag() -- sampling starts with the server, not with its first scrape
  metrics.gauge("switchboard_instance_starts", { state = "waiting" }, function() return (walled.start_queue()) end)
  metrics.gauge("switchboard_instance_starts", { state = "running" }, function() return select(2, walled.start_queue()) end)
  metrics.gauge("switchboard_lua_heap_bytes", {}, function() return math.floor(collectgarbage("count") * 1024) end)
  metrics.gauge("switchboard_proc_lua_objects", { kind = "record" }, function() return (core.proc_lua_objects()) end)
  metrics.gauge("switchboard_proc_lua_objects", { kind = "result" }, function() return select(2, core.proc_lua_objects()) end)
  for _, q in ipairs({ { "0.5", "p50" }, { "0.99", "p99" }, { "1", "max_window" } }) do
    metrics.gauge("switchboard_loop_lag_seconds", { quantile = q[1] }, function() return core.loop_lag()[q[2]] end)
  end
end

return M
