-- The HTTP request path's own cost in sandboxd's routes, without a spawn (bench/README.md "One
-- request table, one bearer check"): N sequential GET /healthz with a bearer and a thread key
-- through routes.on_head and routes.handler behind core.http.serve, over one kept-alive
-- connection from a raw client in the same process, the collector stopped for the batch. Prints
-- the Lua allocation (a count the machine's load does not move) and the process's CPU per
-- request (server and client together).
--
--   cd TREE && lua5.4 bench/request_path.lua TREE BUILD [N=2000]
--
-- Run from the tree it measures (its test support reads policies by relative path); another
-- checkout's TREE and BUILD measure that checkout's Lua and engine.
local TREE, BUILD, N = arg[1], arg[2], tonumber(arg[3] or 2000)
package.path = TREE .. "/lua/?.lua;" .. TREE .. "/lua/?/init.lua;" .. TREE .. "/tests/lua/?.lua;" .. package.path
package.cpath = BUILD .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
core.log_format("text", "warn")
local S = require("support.sandbox")
local routes = require("switchboard.sandboxd.routes")
local fleet = require("switchboard.sandboxd.fleet")
local snap = S.snapshot()
local ctx = { token = S.TOKEN, policy = function() return snap end, build = { commit = "x", built_at = "y" },
  stopping = core.signal(), getenv = os.getenv, log = function() end }
ctx.fleet = fleet.new{ max_instances = function() return 1 end, sleep_after_ms = function() return 60000 end,
  new_runner = function() return {} end, label = function(k) return k end, log = ctx.log }
core.run(function()
  local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, on_head = routes.on_head(ctx), handler = routes.handler(ctx) })
  local up = assert(core.http.connect{ host = "127.0.0.1", port = srv.port })
  local REQ = "GET /healthz HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " .. S.TOKEN ..
    "\r\nX-Thread-Key: bench-thread\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
  local function one()
    up:write(REQ)
    local got = ""
    repeat
      got = got .. assert(up:read(30000))
      local head_end = got:find("\r\n\r\n", 1, true)
      local len = head_end and tonumber(got:match("[Cc]ontent%-[Ll]ength: (%d+)"))
    until head_end and len and #got >= head_end + 3 + len
    assert(got:find("^HTTP/1.1 200"), got)
  end
  for _ = 1, 200 do one() end
  collectgarbage("collect"); collectgarbage("stop")
  local kb0, c0 = collectgarbage("count"), os.clock()
  for _ = 1, N do one() end
  local kb, c = collectgarbage("count") - kb0, os.clock() - c0
  collectgarbage("restart")
  print(string.format("%s: %.2f KB Lua allocation, %.1f us CPU (server and client in one process) per request", TREE, kb / N, c * 1e6 / N))
  up:close(); srv:close(); ctx.fleet:close()
end)
