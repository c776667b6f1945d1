-- The scenario for http_server_leak.c: every path that allocates (requests of each outcome,
-- pipelining, streams cut short, slow readers), then a server left open with connections in
-- each phase when the program ends.
local probe_bin = ...
local core = require("switchboard.core")
core.log_format("text", "error")

local dir = assert(io.popen("mktemp -d \"${TMPDIR:-/tmp}/sb-http-leak.XXXXXX\""):read("l"))
local n = 0
local function probe(port, steps)
  n = n + 1
  local args = {}
  for i, s in ipairs(steps) do args[i] = "'" .. s .. "'" end
  local done = dir .. "/" .. n .. ".done"
  os.execute(string.format("(env -u LD_PRELOAD %s --timeout 5000 127.0.0.1 %d %s > /dev/null 2>&1; " ..
                           "touch %s 2>/dev/null) &", probe_bin, port, table.concat(args, " "), done))
  return done
end
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
local function wait_until(fn)
  local deadline = core.now_ms() + 8000
  while not fn() do
    assert(core.now_ms() < deadline, "scenario timed out")
    core.sleep(10)
  end
end
local GET = "send:GET %s HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n"

core.run(function()
  local a = assert(core.http.serve{port = 0, limits = {max_body_bytes = 100, request_timeout_ms = 300,
                                                      max_write_queue_bytes = 256 * 1024},
    handler = function(req, res)
      if req.path == "/boom" then error("boom") end
      if req.path == "/stream" or req.path == "/flood" then
        res:start(200)
        local chunk = string.rep("s", req.path == "/flood" and 65536 or 10)
        for _ = 1, 200 do
          if not res:write(chunk) then return end
          core.sleep(1)
        end
        return
      end
      res:send(200, {["x-a"] = {"1", "2"}}, req.body)
    end})
  local port = a.port
  local done = {
    probe(port, {GET:format("/"), "send:POST / HTTP/1.1\\r\\nContent-Length: 3\\r\\n\\r\\nabc",
                 GET:format("/boom"), "read"}),
    probe(port, {GET:format("/stream"), "wait:ssss", "close"}),
    probe(port, {GET:format("/flood"), "sleep:1500", "close"}),
    probe(port, {"send:POST / HTTP/1.1\\r\\nContent-Length: 1000\\r\\n\\r\\n", "read"}),
    probe(port, {"send:BAD\\r\\n\\r\\n", "read"}),
    probe(port, {"trickle:100:GET / HTTP/1.1\\r\\n", "read"}),
  }
  wait_until(function()
    for _, d in ipairs(done) do if not exists(d) then return false end end
    return true
  end)
  a:close()
  wait_until(function() return a.connections == 0 end)

  -- left open at exit: idle keep-alive, half a head, a suspended handler, a blocked writer
  local held, flooding = false, false
  local b = assert(core.http.serve{port = 0, handler = function(req, res)
    if req.path == "/hold" then held = true; core.suspend() end
    if req.path == "/flood" then
      res:start(200)
      for _ = 1, 32 do res:write(string.rep("f", 65536)) end
      flooding = true
      core.suspend()
    end
    res:send(200, nil, "x")
  end})
  probe(b.port, {GET:format("/"), "sleep:3000"})
  probe(b.port, {"send:GET / HT", "sleep:3000"})
  probe(b.port, {GET:format("/hold"), "sleep:3000"})
  probe(b.port, {GET:format("/flood"), "sleep:3000"})
  wait_until(function() return held and flooding and b.connections == 4 end)
  b = nil
  collectgarbage() -- an open server stays anchored without a Lua reference
end)
os.execute("rm -rf '" .. dir .. "'")
