-- core.http.serve's on_head hook, the body pool and res:drain (issue 16), against real peers on
-- loopback: the engine's server in this process, raw clients (tests/c/http_probe, http_flood)
-- in other processes. Nothing here blocks the loop: a client runs in the background and the
-- test task polls its output files with core.sleep.
local BUILD = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = BUILD .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")

local PROBE = BUILD .. "/tests/http_probe"
core.log_format("text", "error") -- rejected peers log at info/warn; keep the run readable

-- A private scratch directory (not /tmp/lua_*, which other runs may sweep).
local dir = assert(io.popen("mktemp -d \"${TMPDIR:-/tmp}/sb-http-spec.XXXXXX\""):read("l"))

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

local function wait_until(what, fn, ms)
  local deadline = core.now_ms() + (ms or 5000)
  while true do
    local v = fn()
    if v then return v end
    if core.now_ms() > deadline then error("timed out waiting for " .. what, 2) end
    core.sleep(10)
  end
end

local n_clients = 0

-- Starts a client command in the background; its stdout and stderr go to files.
local function background(cmd)
  n_clients = n_clients + 1
  local base = dir .. "/c" .. n_clients
  local c = {out_path = base .. ".out", err_path = base .. ".err", done_path = base .. ".done"}
  -- children must not inherit a sanitizer runtime preloaded into the interpreter
  assert(os.execute(string.format("(env -u LD_PRELOAD %s > %s 2> %s; echo $? > %s) &", cmd, q(c.out_path),
                                  q(c.err_path), q(c.done_path))))
  function c.output() return read_file(c.out_path) end
  function c.status() return read_file(c.err_path) end
  function c.wait(ms)
    wait_until("client " .. cmd, function() return read_file(c.done_path) ~= "" end, ms)
    return c.output(), c.status()
  end
  function c.wait_output(text, ms)
    return wait_until(string.format("%q in the response", text), function()
      return c.output():find(text, 1, true) ~= nil
    end, ms)
  end
  return c
end

-- http_probe HOST PORT step... (see tests/c/http_probe.c)
local function probe(port, steps, timeout_ms)
  local args = {}
  for i, s in ipairs(steps) do args[i] = q(s) end
  return background(string.format("%s --timeout %d 127.0.0.1 %d %s", PROBE,
                                  timeout_ms or 8000, port, table.concat(args, " ")))
end

local function get(path, extra)
  return "send:GET " .. path .. " HTTP/1.1\\r\\nHost: t\\r\\n" .. (extra or "") .. "\\r\\n"
end

local function serve(handler, limits)
  return assert(core.http.serve{host = "127.0.0.1", port = 0, handler = handler, limits = limits})
end

local function status_of(response)
  return tonumber(response:match("^HTTP/1%.1 (%d%d%d)"))
end

local function body_of(response)
  return response:match("\r\n\r\n(.*)$")
end

-- Decodes a chunked body; errors on bad framing. Returns the body and whether it ended.
local FLOOD = BUILD .. "/tests/http_flood"

local function serve_with(opts)
  opts.host, opts.port = "127.0.0.1", 0
  return assert(core.http.serve(opts))
end

describe("core.http.serve: on_head", function()

  it("sees the head before any body byte; a refusal is answered at once, the body never read", function()
    core.run(function()
      local heads, handled = {}, 0
      local srv = serve_with{
        on_head = function(req)
          heads[#heads + 1] = req
          if req.headers["x-ok"] ~= "yes" then return 401, {["content-type"] = "text/plain"}, "no\n" end
        end,
        handler = function(req, res) handled = handled + 1; res:send(200, nil, "body=" .. req.body) end,
      }
      -- Expect: 100-continue and a refusal: the final status, never 100 Continue
      local c = probe(srv.port, {"send:POST /p HTTP/1.1\\r\\nHost: t\\r\\nExpect: 100-continue\\r\\n" ..
                                 "Content-Length: 1000000\\r\\n\\r\\n", "read"})
      local out = c.wait()
      assert.equal(401, status_of(out))
      assert.is_nil(out:find("100 Continue", 1, true))
      assert.truthy(out:find("connection: close\r\n", 1, true)) -- the unread body ends the connection
      assert.equal(0, handled)
      assert.equal(1000000, heads[1].content_length)
      assert.is_false(heads[1].chunked)
      assert.is_nil(heads[1].body)
      -- accepted: 100 Continue, then the body, then the handler
      c = probe(srv.port, {"send:POST /p HTTP/1.1\\r\\nHost: t\\r\\nX-Ok: yes\\r\\nExpect: 100-continue\\r\\n" ..
                           "Content-Length: 3\\r\\nConnection: close\\r\\n\\r\\n", "wait:100 Continue\\r\\n\\r\\n",
                           "send:abc", "read"})
      out = c.wait()
      assert.truthy(out:find("^HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"))
      assert.truthy(out:find("body=abc", 1, true))
      assert.equal(1, handled)
      srv:close()
    end)
  end)

  it("a refused request without a body keeps the connection for the next one", function()
    core.run(function()
      local srv = serve_with{
        on_head = function(req) if req.path == "/no" then return 404, nil, "nope" end end,
        handler = function(req, res) res:send(200, nil, "yes " .. req.path) end,
      }
      local c = probe(srv.port, {get("/no") .. "GET /yes HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n", "read"})
      local out = c.wait()
      assert.truthy(out:find("^HTTP/1.1 404.-nopeHTTP/1.1 200.-yes /yes$"), out)
      srv:close()
    end)
  end)

  it("a hook that raises answers 500; one that is not a function is refused at serve", function()
    core.run(function()
      local srv = serve_with{ on_head = function() error("boom") end, handler = function(_, res) res:send(200) end }
      local out = probe(srv.port, {get("/x"), "read"}).wait()
      assert.equal(500, status_of(out))
      srv:close()
      assert.has_error(function() core.http.serve{port = 0, handler = print, on_head = 5} end)
    end)
  end)
end)

describe("core.http.serve: the body pool", function()
  it("bodies past max_bodies_bytes together get 503 while the others are read", function()
    core.run(function()
      local srv = serve_with{
        limits = {max_body_bytes = 100000, max_bodies_bytes = 250000},
        handler = function(req, res) res:send(200, nil, tostring(#req.body)) end,
      }
      -- two peers declare 100 kB each and hold their bodies back: 200 kB of the 250 kB pool
      -- are theirs from the moment each got its 100 Continue
      local head = "send:POST /b HTTP/1.1\\r\\nHost: t\\r\\nExpect: 100-continue\\r\\n" ..
                   "Content-Length: 100000\\r\\nConnection: close\\r\\n\\r\\n"
      local holders = {}
      for i = 1, 2 do
        holders[i] = probe(srv.port, {head, "wait:100 Continue", "sleep:4000", "fill:100000:b", "read"}, 15000)
        holders[i].wait_output("100 Continue", 8000)
      end
      -- a third does not fit: 503 at its head, nothing of its body read
      local third = probe(srv.port, {head, "read"}).wait()
      assert.equal(503, status_of(third))
      assert.is_nil(third:find("100 Continue", 1, true))
      -- the holders' bodies are read and handled; the pool is free again afterwards
      for i = 1, 2 do
        local out = holders[i].wait(15000)
        assert.truthy(out:find("HTTP/1.1 200 OK", 1, true), out)
        assert.equal("100000", body_of(out:match("HTTP/1.1 200 OK.*$")))
      end
      local again = probe(srv.port, {head, "wait:100 Continue", "fill:100000:b", "read"}).wait()
      assert.truthy(again:find("HTTP/1.1 200 OK", 1, true))
      srv:close()
    end)
  end)
end)

describe("core.http.serve: res:drain", function()
  teardown(function() os.execute("rm -rf " .. q(dir)) end)
  -- without res:drain the 20 MB would pile up past max_write_queue_bytes (1 MiB) and the
  -- connection would be closed as a slow peer
  it("a handler streaming 20 MB in slices keeps the queue small and a slow reader gets every byte", function()
    core.run(function()
      local srv = serve_with{
        limits = {max_write_queue_bytes = 1024 * 1024},
        handler = function(_, res)
          res:start(200, {["content-length"] = 20 * 1024 * 1024})
          local slice = string.rep("s", 64 * 1024)
          for _ = 1, 320 do
            assert(res:write(slice))
            assert(res:drain())
          end
          res:finish()
        end,
      }
      local req = dir .. "/drain-request"
      local fh = assert(io.open(req, "w"))
      fh:write("GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      fh:close()
      local f = background(string.format("%s --duration 20000 127.0.0.1 %d slowread %s %s 40000000",
        FLOOD, srv.port, q(req), q(dir .. "/drain-answer")))
      local out = f.wait(30000)
      assert.truthy(out:find("eof 1", 1, true), out)
      local got = read_file(dir .. "/drain-answer")
      assert.equal(20 * 1024 * 1024, #(body_of(got) or ""))
      srv:close()
    end)
  end)
end)
