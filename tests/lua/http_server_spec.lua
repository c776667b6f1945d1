-- core.http.serve against real peers on loopback: the engine's server in this process, and
-- clients in other processes (tests/c/http_probe for raw, slow, malformed and vanishing
-- clients; curl for a real one). Nothing here blocks the loop: a client runs in the
-- background and the test task polls its output files with core.sleep.
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

-- Decodes a chunked body; errors on bad framing. Returns the body and whether it ended.
local function dechunk(s)
  local out, pos = {}, 1
  while true do
    local size_hex, after = s:match("^(%x+)\r\n()", pos)
    if not size_hex then return table.concat(out), false end
    local size = tonumber(size_hex, 16)
    if size == 0 then return table.concat(out), s:sub(after, after + 1) == "\r\n" end
    out[#out + 1] = s:sub(after, after + size - 1)
    assert(s:sub(after + size, after + size + 1) == "\r\n", "bad chunk framing")
    pos = after + size + 2
  end
end

local function echo(req, res)
  local names = {}
  for k in pairs(req.headers) do names[#names + 1] = k end
  table.sort(names)
  local lines = {req.method .. " " .. req.path .. " ?" .. req.query, "body=" .. req.body,
                 "remote=" .. req.remote_addr}
  for _, k in ipairs(names) do lines[#lines + 1] = k .. ": " .. req.headers[k] end
  res:send(200, {["content-type"] = "text/plain", ["x-echo"] = "yes"},
           table.concat(lines, "\n") .. "\n")
end

describe("core.http.serve", function()
  teardown(function() os.execute("rm -rf " .. q(dir)) end)

  it("answers GET and POST with the request as the handler saw it", function()
    core.run(function()
      local srv = serve(echo)
      assert.is_true(srv.port > 0)
      local c = probe(srv.port, {
        "send:POST /a/b?x=1&y=%20 HTTP/1.1\\r\\nHost: t\\r\\nX-Rep: one\\r\\nx-rep: two\\r\\n" ..
        "Content-Length: 5\\r\\nConnection: close\\r\\n\\r\\nhello", "read"})
      local out = c.wait()
      assert.equal(200, status_of(out))
      assert.truthy(out:find("content-length: ", 1, true))
      assert.truthy(out:find("connection: close\r\n", 1, true))
      assert.truthy(out:find("\r\ndate: %a%a%a, %d%d %a%a%a %d%d%d%d %d%d:%d%d:%d%d GMT\r\n"))
      local body = body_of(out)
      assert.truthy(body:find("POST /a/b ?x=1&y=%20\n", 1, true))
      assert.truthy(body:find("body=hello\n", 1, true))
      assert.truthy(body:find("remote=127.0.0.1\n", 1, true))
      assert.truthy(body:find("x-rep: one, two\n", 1, true)) -- repeated names joined
      assert.truthy(body:find("host: t\n", 1, true))        -- names lower-cased

      -- a real client
      local curl = background(string.format(
        "curl -s -i --max-time 5 -d 'a=b' -H 'X-Thread-Key: k1' http://127.0.0.1:%d/curl",
        srv.port))
      out = curl.wait()
      assert.equal(200, status_of(out))
      assert.truthy(out:find("POST /curl ?\n", 1, true))
      assert.truthy(out:find("body=a=b\n", 1, true))
      assert.truthy(out:find("x-thread-key: k1\n", 1, true))
      srv:close()
    end)
  end)

  it("streams chunks in order, the head going out before the first write", function()
    core.run(function()
      local handler_task
      local srv = serve(function(req, res)
        res:start(200, {["content-type"] = "text/plain"})
        handler_task = core.current()
        core.suspend() -- the client must see the head while we hold the body back
        for i = 1, 3 do
          res:write("part" .. i .. ";")
          core.suspend() -- and each part before the next is written: no timing to race
        end
        res:finish("end")
      end)
      local c = probe(srv.port, {get("/stream"), "wait:\\r\\n0\\r\\n\\r\\n", "close"})
      c.wait_output("transfer-encoding: chunked\r\n\r\n")
      assert.is_nil(c.output():find("part1", 1, true))
      for i = 1, 3 do
        core.wake(handler_task)
        c.wait_output("part" .. i .. ";")
        if i < 3 then assert.is_nil(c.output():find("part" .. (i + 1), 1, true)) end -- not written yet
      end
      core.wake(handler_task)
      local out = c.wait()
      assert.equal(200, status_of(out))
      local body, ended = dechunk(body_of(out))
      assert.equal("part1;part2;part3;end", body)
      assert.is_true(ended)
      srv:close()
    end)
  end)

  it("keeps a connection alive for a second request", function()
    core.run(function()
      local ports = {}
      local srv = serve(function(req, res)
        ports[#ports + 1] = req.remote_port
        res:send(200, nil, "r" .. #ports)
      end)
      local c = probe(srv.port, {get("/one"), "wait:r1", get("/two"), "wait:r2", "close"})
      local out = c.wait()
      assert.equal(2, #ports)
      assert.equal(ports[1], ports[2])
      assert.equal(2, select(2, out:gsub("HTTP/1%.1 200 OK", "")))
      assert.is_nil(out:find("connection: close", 1, true))
      srv:close()
    end)
  end)

  it("keeps a connection alive after a POST with a body, for a second POST", function()
    core.run(function()
      local ports, bodies = {}, {}
      local srv = serve(function(req, res)
        ports[#ports + 1] = req.remote_port
        bodies[#bodies + 1] = req.body
        res:send(200, nil, "p" .. #ports)
      end)
      local post = "send:POST /exec HTTP/1.1\\r\\nHost: t\\r\\nContent-Length: 5\\r\\n\\r\\n"
      local c = probe(srv.port, {post .. "one-1", "wait:p1", post .. "two-2", "wait:p2", "close"})
      local out = c.wait()
      assert.same({"one-1", "two-2"}, bodies)
      assert.equal(ports[1], ports[2]) -- one connection carried both
      assert.equal(2, select(2, out:gsub("HTTP/1%.1 200 OK", "")))
      assert.is_nil(out:find("connection: close", 1, true))
      srv:close()
    end)
  end)

  it("holds the head of res:start{hold = true} until the body's first bytes or the end", function()
    core.run(function()
      local started, go = {}, {}
      local srv = serve(function(req, res)
        local hold = req.path == "/held"
        res:start(200, {["content-type"] = "text/plain"}, hold and {hold = true} or nil)
        started[req.path] = true
        go[req.path] = core.signal()
        core.sleep(60000, go[req.path])
        res:finish("answer " .. req.path)
      end)
      local held = probe(srv.port, {get("/held", "Connection: close\\r\\n"), "read"})
      wait_until("the held handler started", function() return started["/held"] end, 8000)
      local plain = probe(srv.port, {get("/plain", "Connection: close\\r\\n"), "read"})
      plain.wait_output("HTTP/1.1 200", 8000) -- a head not held goes out at once …
      assert.equal("", held.output())       -- … the held one waits for the body
      go["/held"]:abort("go")
      go["/plain"]:abort("go")
      local out = held.wait()
      assert.equal(200, status_of(out))
      assert.equal("answer /held", (dechunk(body_of(out))))
      assert.truthy(plain.wait():find("answer /plain", 1, true))
      srv:close()
    end)
  end)

  it("serves 200 clients at once, each handler in its own task", function()
    core.run(function()
      local N, inside, peak = 200, 0, 0
      local srv = serve(function(req, res)
        inside = inside + 1
        peak = math.max(peak, inside)
        -- a barrier: nobody answers before all N are inside a handler at the same time
        local deadline = core.now_ms() + 8000
        while peak < N and core.now_ms() < deadline do core.sleep(5) end
        inside = inside - 1
        res:send(peak >= N and 200 or 503, nil, "")
      end)
      local c = background(string.format(
        "curl -s --max-time 15 --parallel --parallel-immediate --parallel-max %d " ..
        "-w '%%{http_code}\\n' 'http://127.0.0.1:%d/r[1-%d]'", N, srv.port, N))
      local out = c.wait(20000)
      assert.equal(N, peak)
      assert.equal(N, select(2, out:gsub("200\n", "")))
      srv:close()
    end)
  end)

  it("answers pipelined requests one at a time, in order", function()
    core.run(function()
      local srv = serve(function(req, res)
        if req.path == "/slow" then core.sleep(50) end
        res:send(200, nil, req.path)
      end)
      local c = probe(srv.port, {
        "send:GET /slow HTTP/1.1\\r\\nHost: t\\r\\n\\r\\nGET /fast HTTP/1.1\\r\\nHost: t\\r\\n" ..
        "Connection: close\\r\\n\\r\\n", "read"})
      local out = c.wait()
      local first, second = out:find("/slow", 1, true), out:find("/fast", 1, true)
      assert.truthy(first and second and first < second)
      srv:close()
    end)
  end)

  it("answers 431 to an oversized head and keeps serving", function()
    core.run(function()
      local srv = serve(echo, {max_header_bytes = 1024})
      local big = probe(srv.port, {get("/", "X-Big: " .. string.rep("a", 2000) .. "\\r\\n"), "read"})
      local out, status = big.wait()
      assert.equal(431, status_of(out))
      assert.truthy(out:find("connection: close", 1, true))
      assert.truthy(body_of(out):find("too large", 1, true))
      assert.truthy(status:find("probe: eof", 1, true))
      local ok = probe(srv.port, {get("/fine", "Connection: close\\r\\n"), "read"})
      assert.equal(200, status_of(ok.wait()))
      srv:close()
    end)
  end)

  it("answers 413 to a declared or streamed body over the limit", function()
    core.run(function()
      local called = 0
      local srv = serve(function(req, res) called = called + 1; echo(req, res) end,
                        {max_body_bytes = 1000})
      -- declared: refused at the head, before the body is read
      local declared = probe(srv.port, {
        "send:POST / HTTP/1.1\\r\\nHost: t\\r\\nContent-Length: 200000\\r\\n\\r\\n",
        "fill:200000:x", "read"})
      local out = declared.wait()
      assert.equal(413, status_of(out))
      -- chunked: refused while reading
      local chunked = probe(srv.port, {
        "send:POST / HTTP/1.1\\r\\nHost: t\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n",
        "send:400\\r\\n", "fill:1024:y", "send:\\r\\n0\\r\\n\\r\\n", "read"})
      assert.equal(413, status_of(chunked.wait()))
      -- at the limit is fine
      local fine = probe(srv.port, {
        "send:POST / HTTP/1.1\\r\\nHost: t\\r\\nContent-Length: 1000\\r\\nConnection: close\\r\\n\\r\\n",
        "fill:1000:z", "read"})
      local body = body_of(fine.wait())
      assert.truthy(body:find("body=" .. string.rep("z", 1000), 1, true))
      assert.equal(1, called)
      srv:close()
    end)
  end)

  it("answers 100 Continue to a client that expects it", function()
    core.run(function()
      local srv = serve(echo)
      local c = probe(srv.port, {
        "send:POST / HTTP/1.1\\r\\nHost: t\\r\\nExpect: 100-continue\\r\\nContent-Length: 2\\r\\n" ..
        "Connection: close\\r\\n\\r\\n", "wait:HTTP/1.1 100 Continue\\r\\n\\r\\n", "send:ok", "read"})
      local out = c.wait()
      assert.truthy(out:find("^HTTP/1%.1 100 Continue\r\n\r\nHTTP/1%.1 200 OK"))
      assert.truthy(out:find("body=ok\n", 1, true))
      srv:close()
    end)
  end)

  it("answers 408 to a slowloris while another client is served at once", function()
    core.run(function()
      -- the slowloris trickles a byte per 100 ms (its head takes over 5 s); the timeout ends it
      -- at 2 s. The quick client must not wait for that: it is answered while the slowloris
      -- still trickles (before its 408), however slowly a loaded machine runs either.
      local srv = serve(echo, {request_timeout_ms = 2000})
      local started = core.now_ms()
      local slow = probe(srv.port, {"trickle:100:GET / HTTP/1.1\\r\\nHost: t\\r\\nX-Slow: abcdefgh\\r\\n\\r\\n",
                                    "read"})
      local slow_out
      core.go(function() slow_out = slow.wait() end)
      core.sleep(100)
      local quick = probe(srv.port, {get("/quick", "Connection: close\\r\\n"), "read"})
      local out = quick.wait()
      assert.equal(200, status_of(out))
      assert.is_nil(slow_out, "the quick client was answered only after the slowloris ended")
      local t0 = core.now_ms()
      while slow_out == nil and core.now_ms() - t0 < 60000 do core.sleep(20) end
      assert.equal(408, status_of(slow_out))
      assert.truthy(slow_out:find("connection: close", 1, true))
      local elapsed = core.now_ms() - started
      -- the timeout, not the trickle's end (over 5 s) nor anything before the 2 s
      assert.is_true(elapsed >= 2000 and elapsed < 30000, "408 after " .. elapsed .. " ms")
      srv:close()
    end)
  end)

  it("does not time out a handler that takes longer than the request timeout", function()
    core.run(function()
      -- the timeout bounds the request's arrival: 2 s, so a probe descheduled between its
      -- connect and its write on a loaded machine still delivers in time (at 100 ms it got a
      -- 408 and a reset); the handler then runs 1 s past it
      local srv = serve(function(req, res)
        core.sleep(3000)
        res:send(200, nil, "late but fine")
      end, {request_timeout_ms = 2000})
      local c = probe(srv.port, {get("/", "Connection: close\\r\\n"), "read"}, 30000)
      local out, status = c.wait(60000)
      assert.equal(200, status_of(out), status)
      assert.equal("late but fine", body_of(out))
      srv:close()
    end)
  end)

  it("closes a keep-alive connection that stays idle", function()
    core.run(function()
      -- 1 s: a probe descheduled between its connect and its write must not be taken for idle
      local srv = serve(function(req, res) res:send(200, nil, "x") end, {idle_timeout_ms = 1000})
      local t0 = core.now_ms()
      local c = probe(srv.port, {get("/"), "read"}, 30000)
      local out, status = c.wait(60000)
      assert.equal(200, status_of(out), status)
      assert.truthy(status:find("probe: eof", 1, true))
      assert.is_true(core.now_ms() - t0 >= 1000)
      srv:close()
    end)
  end)

  it("answers 400 to malformed HTTP and keeps serving others", function()
    core.run(function()
      local srv = serve(echo)
      local cases = {
        "send:HELLO WORLD\\r\\n\\r\\n",
        "send:GET / HTTP/1.1\\r\\nBad Header: x\\r\\n\\r\\n",
        "send:POST / HTTP/1.1\\r\\nContent-Length: 3\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\nabc",
        "send:GET / HTTP/1.1\\r\\nX: a\\x00b\\r\\n\\r\\n",
      }
      local bad = {}
      for i, step in ipairs(cases) do bad[i] = probe(srv.port, {step, "read"}) end
      local good = probe(srv.port, {get("/ok", "Connection: close\\r\\n"), "read"})
      for _, c in ipairs(bad) do
        local out, status = c.wait()
        assert.equal(400, status_of(out))
        assert.truthy(body_of(out):find("^bad request"))
        assert.truthy(status:find("probe: eof", 1, true))
      end
      assert.equal(200, status_of(good.wait()))
      srv:close()
    end)
  end)

  it("refuses connections past max_connections and serves again once one closes", function()
    core.run(function()
      local held = {}
      local srv = serve(function(req, res)
        if req.path == "/hold" then
          held[#held + 1] = core.current()
          core.suspend()
        end
        res:send(200, {connection = "close"}, req.path)
      end, {max_connections = 2})
      local a = probe(srv.port, {get("/hold"), "read"})
      local b = probe(srv.port, {get("/hold"), "read"})
      wait_until("two held requests", function() return #held == 2 end)
      assert.equal(2, srv.connections)
      local extra = probe(srv.port, {"sleep:100", get("/extra"), "read"})
      local out = extra.wait()
      assert.is_nil(out:find("/extra", 1, true))
      assert.truthy(out == "" or status_of(out) == 503)
      for _, t in ipairs(held) do core.wake(t) end
      assert.equal(200, status_of(a.wait()))
      assert.equal(200, status_of(b.wait()))
      wait_until("connections closed", function() return srv.connections == 0 end)
      local again = probe(srv.port, {get("/again"), "read"})
      assert.equal("/again", body_of(again.wait()))
      srv:close()
    end)
  end)

  it("answers 500 when a handler raises before sending, and keeps serving", function()
    core.run(function()
      local srv = serve(function(req, res)
        if req.path == "/boom" then error("handler exploded") end
        if req.path == "/bad-header" then res:send(200, {["x-evil"] = "a\r\nx-injected: 1"}, "") end
        res:send(200, nil, "fine")
      end)
      local c = probe(srv.port, {get("/boom"), "read"})
      local out = c.wait()
      assert.equal(500, status_of(out))
      assert.is_nil(out:find("exploded", 1, true)) -- nothing internal leaks to the client
      local injected = probe(srv.port, {get("/bad-header"), "read"})
      out = injected.wait()
      assert.equal(500, status_of(out))
      assert.is_nil(out:find("x-injected", 1, true))
      local ok = probe(srv.port, {get("/", "Connection: close\\r\\n"), "read"})
      assert.equal("fine", body_of(ok.wait()))
      srv:close()
    end)
  end)

  it("cuts a stream short when the handler raises mid-body", function()
    core.run(function()
      local srv = serve(function(req, res)
        res:start(200)
        res:write("partial")
        error("mid-stream failure")
      end)
      local out, status = probe(srv.port, {get("/"), "read"}).wait()
      assert.equal(200, status_of(out))
      local body, ended = dechunk(body_of(out))
      assert.equal("partial", body)
      assert.is_false(ended) -- the client can tell the body is incomplete
      assert.truthy(status:find("probe: eof", 1, true) or status:find("probe: reset", 1, true))
      srv:close()
    end)
  end)

  it("finishes for a handler that returns without finishing", function()
    core.run(function()
      local srv = serve(function(req, res)
        if req.path == "/started" then
          res:start(200)
          res:write("abc")
        end -- "/nothing" returns without a word
      end)
      local c = probe(srv.port, {get("/nothing"), "wait:\\r\\n\\r\\n", get("/started"),
                                 "wait:0\\r\\n\\r\\n", "close"})
      local out = c.wait()
      assert.truthy(out:find("^HTTP/1%.1 204 No Content\r\ndate: [^\r]+ GMT\r\n\r\nHTTP/1%.1 200 OK"))
      local second = out:match("HTTP/1%.1 200 OK.-\r\n\r\n(.*)$")
      local body, ended = dechunk(second)
      assert.equal("abc", body)
      assert.is_true(ended)
      srv:close()
    end)
  end)

  it("marks res.closed when the peer disconnects mid-stream and drops later writes", function()
    core.run(function()
      local result
      local srv = serve(function(req, res)
        res:start(200)
        local writes = 0
        while not res.closed and writes < 500 do
          writes = writes + 1
          res:write("tick\n")
          core.sleep(10)
        end
        result = {closed = res.closed, writes = writes, after = res:write("dropped"),
                  finish = res:finish()}
      end)
      local c = probe(srv.port, {get("/"), "wait:tick", "close"})
      c.wait()
      wait_until("the handler to see the close", function() return result end)
      assert.is_true(result.closed)
      assert.is_true(result.writes < 500)
      assert.is_false(result.after)
      assert.is_false(result.finish)
      srv:close()
    end)
  end)

  it("closes a peer that stops reading once too much is queued", function()
    core.run(function()
      local result
      local srv = serve(function(req, res)
        res:start(200)
        local chunk = string.rep("x", 64 * 1024)
        local sent = 0
        while res:write(chunk) and sent < 4096 do -- at most 256 MiB
          sent = sent + 1
          if sent % 16 == 0 then core.sleep(1) end
        end
        result = {closed = res.closed, sent = sent}
      end, {max_write_queue_bytes = 1024 * 1024})
      local c = probe(srv.port, {get("/"), "sleep:3000", "close"}, 10000)
      wait_until("the writer to give up", function() return result end, 8000)
      assert.is_true(result.closed)
      assert.is_true(result.sent < 4096)
      c.wait(10000)
      srv:close()
    end)
  end)

  it("frames HEAD and HTTP/1.0 responses correctly", function()
    core.run(function()
      local srv = serve(function(req, res)
        if req.path == "/stream" then
          res:start(200)
          res:write("ten bytes!")
          res:finish()
        else
          res:send(200, nil, "hello")
        end
      end)
      local head = probe(srv.port, {"send:HEAD / HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n",
                                    "read"}).wait()
      assert.truthy(head:find("content-length: 5\r\n", 1, true))
      assert.equal("", body_of(head))
      local old = probe(srv.port, {"send:GET /stream HTTP/1.0\\r\\n\\r\\n", "read"}).wait()
      assert.equal(200, status_of(old))
      assert.is_nil(old:find("chunked", 1, true))
      assert.truthy(old:find("connection: close", 1, true))
      assert.equal("ten bytes!", body_of(old))
      srv:close()
    end)
  end)

  it("raises on programmer errors in res and in serve's arguments", function()
    core.run(function()
      assert.has_error(function() core.http.serve{port = 0} end)
      assert.has_error(function() core.http.serve{port = 70000, handler = print} end)
      assert.has_error(function()
        core.http.serve{port = 0, handler = print, limits = {max_body = 1}}
      end)
      local errors = {}
      local srv = serve(function(req, res)
        local function try(fn) local ok, e = pcall(fn); if not ok then errors[#errors + 1] = e end end
        try(function() res:write("before start") end)
        try(function() res:start(99) end)
        try(function() res:start(200, {["transfer-encoding"] = "gzip"}) end)
        try(function() res:start(200, {["bad name"] = "x"}) end)
        res:start(200, {["content-length"] = "3"})
        try(function() res:write("four") end)
        res:finish("abc")
        try(function() res:finish() end)
      end)
      local out = probe(srv.port, {get("/", "Connection: close\\r\\n"), "read"}).wait()
      assert.equal("abc", body_of(out))
      assert.equal(6, #errors)
      srv:close()
    end)
  end)

  it("reports a port in use as a listen failure", function()
    core.run(function()
      local srv = serve(echo)
      local again, err = core.http.serve{port = srv.port, handler = echo}
      assert.is_nil(again)
      assert.equal("listen", err.kind)
      assert.truthy(err.message:find(tostring(srv.port), 1, true))
      srv:close()
    end)
  end)

  it("close() stops accepting and lets an open request finish", function()
    core.run(function()
      local waiting
      local srv = serve(function(req, res)
        waiting = core.current()
        core.suspend()
        res:send(200, nil, "finished after close")
      end)
      local port = srv.port
      local c = probe(port, {get("/"), "read"})
      local idle = probe(port, {"sleep:2000", get("/late"), "read"}) -- idle when close comes
      wait_until("the request to reach the handler", function() return waiting end)
      wait_until("the idle connection", function() return srv.connections == 2 end)
      srv:close()
      assert.is_true(srv.closed)
      local refused = probe(port, {get("/"), "read"})
      assert.truthy(select(2, refused.wait()):find("connect-failed", 1, true))
      core.wake(waiting)
      local out = c.wait()
      assert.equal(200, status_of(out))
      assert.truthy(out:find("connection: close\r\n", 1, true))
      assert.equal("finished after close", body_of(out))
      assert.equal("", (idle.wait()))
      wait_until("every connection to go", function() return srv.connections == 0 end)
    end)
  end)
end)
