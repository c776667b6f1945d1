-- core.http.serve's on_head hook, the body pool and res:drain (issue 16), against real peers on
-- loopback: the engine's server in this process, raw clients (tests/c/http_probe, http_flood)
-- in other processes. Nothing here blocks the loop: a client runs in the background and the
-- test task polls its output files with core.sleep.
local P = require("support.http_peers")
local BUILD = P.BUILD
local core = P.core
local PROBE = P.PROBE
local dir = P.dir
local q = P.q
local read_file = P.read_file
local wait_until = P.wait_until
local background = P.background
local probe = P.probe
local get = P.get
local serve = P.serve
local status_of = P.status_of
local body_of = P.body_of

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
      -- the holders' whole requests take as long as the third's answer takes on a loaded
      -- machine: the request timeout is not the subject here, so it is far from the bounds below
      local srv = serve_with{
        limits = {max_body_bytes = 100000, max_bodies_bytes = 250000, request_timeout_ms = 120000},
        handler = function(req, res) res:send(200, nil, tostring(#req.body)) end,
      }
      -- two peers declare 100 kB each and hold their bodies back: 200 kB of the 250 kB pool
      -- are theirs from the moment each got its 100 Continue, until the third is answered (a
      -- fixed pause there was outlasted at load 57: the third came after the holders let go)
      local head = "send:POST /b HTTP/1.1\\r\\nHost: t\\r\\nExpect: 100-continue\\r\\n" ..
                   "Content-Length: 100000\\r\\nConnection: close\\r\\n\\r\\n"
      local let_go = dir .. "/pool-let-go"
      local holders = {}
      for i = 1, 2 do
        holders[i] = probe(srv.port, {head, "wait:100 Continue", "await:" .. let_go, "fill:100000:b", "read"}, 60000)
        holders[i].wait_output("100 Continue", 60000)
      end
      -- a third does not fit: 503 at its head, nothing of its body read
      local third = probe(srv.port, {head, "read"}, 60000).wait(60000)
      assert(io.open(let_go, "w")):close()
      assert.equal(503, status_of(third))
      assert.is_nil(third:find("100 Continue", 1, true))
      -- the holders' bodies are read and handled; the pool is free again afterwards
      for i = 1, 2 do
        local out = holders[i].wait(60000)
        assert.truthy(out:find("HTTP/1.1 200 OK", 1, true), out)
        assert.equal("100000", body_of(out:match("HTTP/1.1 200 OK.*$")))
      end
      local again = probe(srv.port, {head, "wait:100 Continue", "fill:100000:b", "read"}, 60000).wait(60000)
      assert.truthy(again:find("HTTP/1.1 200 OK", 1, true))
      srv:close()
    end)
  end)
end)

-- The handler's 20 MB answer, in 64 KiB slices with a drain after each; it stops when the peer
-- is gone.
local STREAMED = 20 * 1024 * 1024
local function stream_20mb(res)
  res:start(200, {["content-length"] = STREAMED})
  local slice = string.rep("s", 64 * 1024)
  for _ = 1, STREAMED // #slice do
    if not (res:write(slice) and res:drain()) then return false end
  end
  res:finish()
  return true
end

-- A slowread client (tests/c/http_flood.c) of GET /big at `rate` bytes/s, in the background;
-- its answer goes to dir/<name>-answer.
local function read_big(port, name, rate, duration_ms)
  local req = dir .. "/" .. name .. "-request"
  local fh = assert(io.open(req, "w"))
  fh:write("GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
  fh:close()
  return background(string.format("%s --duration %d 127.0.0.1 %d slowread %s %s %d",
    FLOOD, duration_ms, port, q(req), q(dir .. "/" .. name .. "-answer"), rate))
end

describe("core.http.serve: res:drain", function()
  -- The loop runs due timers before it polls the sockets. A kept-alive connection whose next
  -- request arrived while the server's own loop was held up must be answered, not closed by
  -- its idle timer as if nothing had come (the peer saw "Empty reply from server").
  it("answers a request that arrived in time while the loop was busy, though its timer fell due", function()
    core.run(function()
      local IDLE_MS = 1000
      local srv = serve_with{
        limits = {idle_timeout_ms = IDLE_MS, request_timeout_ms = IDLE_MS},
        handler = function(req, res) res:send(200, nil, req.path .. "-ok\n") end,
      }
      local go, sent = dir .. "/held-go", dir .. "/held-sent"
      local peer = probe(srv.port, {get("/first"), "wait:first-ok", "await:" .. go,
                                    get("/after", "Connection: close\\r\\n"), "mark:" .. sent, "read"}, 60000)
      peer.wait_output("first-ok")
      core.sleep(10) -- a turn of the loop: the kept-alive connection's idle timer is armed
      -- hold the loop (this task runs on it) until the peer has sent its next request and the
      -- idle timer is well past due
      local t0 = core.now_ms()
      assert(io.open(go, "w")):close()
      while not (io.open(sent) and core.now_ms() - t0 > 2 * IDLE_MS) do
        assert(core.now_ms() - t0 < 60000, "the peer did not send its request in 60 s")
      end
      local out = peer.wait(90000)
      assert.truthy(out:find("after-ok", 1, true), out)
      srv:close()
    end)
  end)

  teardown(function() os.execute("rm -rf " .. q(dir)) end)
  -- without res:drain the 20 MB would pile up past max_write_queue_bytes (1 MiB) and the
  -- connection would be closed as a slow peer
  it("a handler streaming 20 MB in slices keeps the queue small and a slow reader gets every byte", function()
    core.run(function()
      local srv = serve_with{
        limits = {max_write_queue_bytes = 1024 * 1024},
        handler = function(_, res) assert(stream_20mb(res)) end,
      }
      local out = read_big(srv.port, "drain", 40000000, 20000).wait(30000)
      assert.truthy(out:find("eof 1", 1, true), out)
      assert.equal(STREAMED, #(body_of(read_file(dir .. "/drain-answer")) or ""))
      srv:close()
    end)
  end)

  -- A response waiting in res:drain ends a peer that takes none of its bytes for
  -- request_timeout_ms. The loop runs due timers before it polls the sockets, so after the
  -- server's own loop was held up, that timer fires before the loop has seen the peer read all
  -- along: the kernel's count of the bytes the peer took is what decides.
  it("a reader that kept reading while the server's loop was held up is not taken for a slow peer", function()
    core.run(function()
      local srv = serve_with{
        limits = {request_timeout_ms = 1000},
        handler = function(req, res)
          if req.path == "/hold" then
            -- resumed from the child's end (the loop's I/O phase, not its timers): the loop's
            -- next turn begins with the timers that fell due meanwhile
            assert(core.spawn{argv = {"true"}, env = {}}):wait()
            local t0 = core.now_ms()
            while core.now_ms() - t0 < 2500 do end -- held 2.5 s, over twice request_timeout_ms
            return res:send(200, nil, "held\n")
          end
          stream_20mb(res)
        end,
      }
      -- 4 MB/s through a 64 KiB window: the handler waits in res:drain most of the time
      local reader = read_big(srv.port, "held", 4000000, 60000)
      wait_until("the answer's first megabyte", function()
        local f = io.open(dir .. "/held-answer", "rb")
        local size = f and f:seek("end") or 0
        if f then f:close() end
        return size > 1000 * 1000
      end)
      local hold = probe(srv.port, {get("/hold", "Connection: close\\r\\n"), "read"}, 30000)
      assert.truthy(hold.wait():find("held", 1, true))
      local out = reader.wait(90000)
      assert.truthy(out:find("eof 1", 1, true), out)
      assert.equal(STREAMED, #(body_of(read_file(dir .. "/held-answer")) or ""))
      srv:close()
    end)
  end)
end)

-- Reads a raw connection to its end (the server closes after a `connection: close` answer).
local function read_all(up)
  local parts = {}
  while true do
    local bytes = up:read(30000)
    if not bytes then break end
    parts[#parts + 1] = bytes
  end
  return table.concat(parts)
end

describe("core.http.serve: the request, built once", function()
  it("hands the handler the very table the hook let on: the body in, the head-only fields out", function()
    core.run(function()
      local seen, got = {}, {}
      local srv = serve_with{
        on_head = function(req)
          seen[#seen + 1] = req
          req.mark = "left by the hook"
          if req.path == "/no" then return 403, nil, "no\n" end
        end,
        handler = function(req, res) got[#got + 1] = req; res:send(200, nil, req.path .. "=" .. req.body) end,
      }
      -- three requests on one kept-alive connection, one of them refused at its head
      local up = assert(core.http.connect{ host = "127.0.0.1", port = srv.port })
      up:write("POST /a HTTP/1.1\r\nHost: t\r\nX-One: 1\r\nContent-Length: 3\r\n\r\nabc" ..
               "GET /no HTTP/1.1\r\nHost: t\r\n\r\n" ..
               "GET /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      local out = read_all(up)
      up:close()
      assert.truthy(out:find("/a=abc", 1, true))
      assert.truthy(out:find("HTTP/1.1 403", 1, true))
      assert.truthy(out:find("/b=", 1, true))
      assert.equal(3, #seen)
      assert.equal(2, #got) -- the refused request never reached the handler
      assert.is_true(rawequal(seen[1], got[1]))
      assert.is_true(rawequal(seen[3], got[2]))
      assert.is_false(rawequal(got[1], got[2])) -- each request a table of its own
      assert.equal("abc", got[1].body)
      assert.equal("", got[2].body)
      assert.is_nil(got[1].content_length)
      assert.is_nil(got[1].chunked)
      assert.equal("left by the hook", got[1].mark)
      assert.equal("1", got[1].headers["x-one"])
      srv:close()
    end)
  end)

  it("builds the handler's table afresh when another connection's hook ran while the body was awaited", function()
    core.run(function()
      local seen, got = {}, {}
      local srv = serve_with{
        on_head = function(req) seen[#seen + 1] = req; req.mark = "left by the hook" end,
        handler = function(req, res) got[req.path] = req; res:send(200, nil, req.path .. "=" .. req.body) end,
      }
      local a = assert(core.http.connect{ host = "127.0.0.1", port = srv.port })
      a:write("POST /a HTTP/1.1\r\nHost: t\r\nX-One: 1\r\nConnection: close\r\nContent-Length: 3\r\n\r\n")
      wait_until("the hook saw /a", function() return #seen == 1 end)
      local b = assert(core.http.connect{ host = "127.0.0.1", port = srv.port })
      b:write("GET /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      assert.truthy(read_all(b):find("/b=", 1, true))
      b:close()
      a:write("abc")
      assert.truthy(read_all(a):find("/a=abc", 1, true))
      a:close()
      assert.is_true(rawequal(seen[2], got["/b"]))
      local fresh = got["/a"]
      assert.is_false(rawequal(seen[1], fresh))
      assert.is_nil(fresh.mark) -- nothing the hook left: a check it made is made again
      assert.equal("abc", fresh.body)
      assert.equal("1", fresh.headers["x-one"])
      assert.equal("POST", fresh.method)
      assert.is_nil(fresh.content_length)
      srv:close()
    end)
  end)
end)
