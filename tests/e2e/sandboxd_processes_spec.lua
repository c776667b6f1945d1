-- Black-box against the real walled sandboxd (issue 39 items 1 and 2): background processes
-- (POST/GET /processes, GET /processes/<id>/logs, DELETE /processes/<id>) and exposed ports
-- (POST /ports → a preview URL proxied by sandboxd into the thread's instance). A Python and a
-- Node HTTP server started through POST /processes answer a later /exec curl, are listed, show
-- their request lines in their logs, are reached from the host through the exposed URL (with
-- keep-alive), and are gone after DELETE; a wrong token is a 404; the limits hold.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)

local function policy_dir()
  return S.walled_policy_dir(UID_BASE, "sandbox.sleep_after = \"10m\"\nsandbox.max_ports = 2\n"
    .. "sandbox.max_processes = 3\nsandbox.process_log_bytes = 4096\n"
    .. "server.request_timeout_ms = 1 * second\nserver.max_header_bytes = 4 * KiB\n")
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local THREAD = "procs-thread"
local PROBE = (os.getenv("SB_BUILD_DIR") or "./build") .. "/tests/http_probe"

-- tests/c/http_probe.c run to its end: what it received, and its status line.
local function probe(port, steps, timeout_ms)
  local argv = { PROBE, "--timeout", tostring(timeout_ms or 8000), "127.0.0.1", tostring(port) }
  for _, step in ipairs(steps) do argv[#argv + 1] = step end
  local p = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 64 << 20, deadline_ms = (timeout_ms or 8000) + 5000 })
  local r = p:wait()
  return r.stdout, r.stderr
end
local function status_of(raw) return tonumber((raw or ""):match("^HTTP/1%.1 (%d%d%d)")) end

local function call(h, method, path, body, thread)
  local status, headers, raw = S.call(h.url, path, { method = method, body = body, thread = thread or THREAD })
  assert.is_number(status, tostring(headers and headers.message))
  local text = raw:gsub("^%s+", "") -- (/exec's heartbeats come first)
  local doc = text:sub(1, 1) == "{" and cjson.decode(text) or nil
  return status, doc, raw
end

local function exec(h, command)
  local status, doc, raw = call(h, "POST", "/exec", { command = command, timeoutMs = 60000 })
  assert.equal(200, status, raw)
  return doc
end

-- Waits until `command` (through /exec) exits 0; returns its last answer.
local function until_ok(h, command)
  local doc
  S.wait_for(function()
    doc = exec(h, command)
    return doc.exitCode == 0
  end, 60000)
  return doc
end

local function start(h, command)
  local status, doc, raw = call(h, "POST", "/processes", { command = command })
  assert.equal(201, status, raw)
  return doc
end

local SERVERS = {
  { "python3", "exec /usr/bin/python3 -u -m http.server %d --bind 127.0.0.1", 8765 },
  { "node", "exec node -e \"require('http').createServer((q,s)=>{console.log('node '+q.method+' '+q.url);"
    .. "s.setHeader('x-from','node');s.end('hello from node '+q.url)}).listen(%d,'127.0.0.1')\"", 8766 },
}

describe_walls("sandboxd background processes and ports", function()
  it("runs Python and Node servers that /exec and the preview URL reach, lists them, logs them, kills them", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local status, doc = call(h, "GET", "/processes")
      assert.equal(200, status)
      assert.same({}, doc.processes)
      exec(h, "echo index-page > index.html")
      local started = {}
      for _, s in ipairs(SERVERS) do
        local t0 = core.now_ms()
        local p = start(h, s[2]:format(s[3]))
        assert.equal("running", p.status)
        assert.is_number(p.pid)
        assert.truthy(p.id:match("^p%x+$"))
        assert.truthy(p.startedAt:match("^%d%d%d%d%-%d%d%-%d%dT"))
        local answer = until_ok(h, ("curl -sS -i http://127.0.0.1:%d/index.html"):format(s[3]))
        assert.equal(0, answer.exitCode, answer.stderr)
        print(("%s: POST /processes → answering a curl in %.0f ms"):format(s[1], core.now_ms() - t0))
        started[s[1]] = p
      end
      -- listed
      status, doc = call(h, "GET", "/processes")
      assert.equal(200, status)
      assert.equal(2, #doc.processes)
      for _, p in ipairs(doc.processes) do assert.equal("running", p.status) end
      -- another thread sees none of them
      status, doc = call(h, "GET", "/processes", nil, "another-thread")
      assert.same({}, doc.processes)
      -- exposed, and reached from the host through the preview URL
      local urls = {}
      for _, s in ipairs(SERVERS) do
        local st, d, raw = call(h, "POST", "/ports", { port = s[3] })
        assert.equal(201, st, raw)
        assert.truthy(d.url:find("^" .. h.url:gsub("%p", "%%%0") .. "/ports/%x+/$"), d.url)
        urls[s[1]] = d.url
      end
      -- the gauges count them
      local _, _, text = S.call(h.url, "/metrics", { method = "GET", thread = false })
      assert.truthy(text:find("\nswitchboard_background_processes 2\n", 1, true), text)
      assert.truthy(text:find("\nswitchboard_exposed_ports 2\n", 1, true), text)
      local st, hd, body = core.http.request{ url = urls.python3 .. "index.html", deadline_ms = 30000 }
      assert.equal(200, st, body)
      assert.equal("index-page\n", body)
      st, hd, body = core.http.request{ url = urls.node .. "some/path?x=1", deadline_ms = 30000 }
      assert.equal(200, st, body)
      assert.equal("node", hd["x-from"])
      assert.equal("hello from node /some/path?x=1", body)
      -- a POST with a body, through the proxy
      st, _, body = core.http.request{ method = "POST", url = urls.node .. "posted", body = "abc", deadline_ms = 30000 }
      assert.equal(200, st, body)
      -- keep-alive: many requests on one connection (curl reuses it; each answer is whole)
      local r = exec(h, "true") -- (the instance is awake)
      assert.equal(0, r.exitCode)
      local p = io.popen(("curl -sS -o /dev/null -o /dev/null -o /dev/null -w '%%{http_code} %%{num_connects}\\n' %s %s %s 2>&1")
        :format(urls.python3 .. "index.html", urls.python3 .. "index.html", urls.python3 .. "index.html"))
      local out = p:read("a")
      p:close()
      assert.equal("200 1\n200 0\n200 0\n", out)
      -- a wrong token is a 404, and no bearer is asked of a preview
      st, _, body = core.http.request{ url = h.url .. "/ports/" .. ("0"):rep(32) .. "/", deadline_ms = 30000 }
      assert.equal(404, st, body)
      -- the logs show the request lines
      for name, proc in pairs(started) do
        local ok = S.wait_for(function()
          local _, d = call(h, "GET", "/processes/" .. proc.id .. "/logs")
          return (d.stdout .. d.stderr):find(name == "node" and "node GET /some/path" or "GET /index.html", 1, true)
        end, 30000)
        assert.truthy(ok, name .. " logs lack the request line")
      end
      -- the port limit (2 here) and the process limit (3 here)
      st, doc = call(h, "POST", "/ports", { port = 9999 })
      assert.equal(409, st)
      assert.equal("too-many-ports", doc.reason)
      start(h, "sleep 600")
      st, doc = call(h, "POST", "/processes", { command = "sleep 600" })
      assert.equal(409, st)
      assert.equal("too-many-processes", doc.reason)
      -- DELETE kills the group: the servers answer no more
      for _, s in ipairs(SERVERS) do
        local proc = started[s[1]]
        st, doc = call(h, "DELETE", "/processes/" .. proc.id)
        assert.equal(200, st)
        assert.equal("killed", doc.status)
        local gone = exec(h, ("curl -sS http://127.0.0.1:%d/"):format(s[3]))
        assert.are_not.equal(0, gone.exitCode)
        st, _, body = core.http.request{ url = urls[s[1]], deadline_ms = 30000 }
        assert.equal(502, st, body)
      end
      -- DELETE /ports: the URL stops working
      st = call(h, "DELETE", "/ports/8765")
      assert.equal(200, st)
      st = core.http.request{ url = urls.python3, deadline_ms = 30000 }
      assert.equal(404, st)
      -- an exit is recorded with its code
      local quick = start(h, "echo out; echo err >&2; exit 3")
      assert.truthy(S.wait_for(function()
        local _, d = call(h, "GET", "/processes")
        for _, x in ipairs(d.processes) do
          if x.id == quick.id and x.status == "exited" then return x.exitCode == 3 end
        end
      end, 30000))
      local _, logs = call(h, "GET", "/processes/" .. quick.id .. "/logs")
      assert.same({ stdout = "out\n", stderr = "err\n" }, logs)
      -- the tail is bounded (process_log_bytes = 4096 here) and keeps the end
      local loud = start(h, "seq 1 20000")
      assert.truthy(S.wait_for(function()
        local _, d = call(h, "GET", "/processes/" .. loud.id .. "/logs")
        return d.stdout:find("\n20000\n$") and #d.stdout <= 4096
      end, 30000))
      h:stop()
      assert.equal(0, h:wait().exit, h.log():sub(-3000))
    end)
  end)

  it("passes a WebSocket echo and a streamed (chunked) answer through the preview URL", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      -- python3-websockets from the host's /usr, which the instance shows read-only
      start(h, "exec /usr/bin/python3 -u -c \"import asyncio, websockets\n"
        .. "async def echo(ws, path=None):\n"
        .. "    async for m in ws: await ws.send('echo:' + m)\n"
        .. "async def main():\n"
        .. "    async with websockets.serve(echo, '127.0.0.1', 8770): await asyncio.Future()\n"
        .. "asyncio.run(main())\"")
      -- a chunked answer whose second half comes a second after its first
      start(h, "exec node -e \"require('http').createServer((q,s)=>{s.write('first,');"
        .. "setTimeout(()=>s.end('second'),1000)}).listen(8771,'127.0.0.1')\"")
      until_ok(h, "curl -sS -o /dev/null http://127.0.0.1:8771/")
      until_ok(h, "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8770))\"")
      local _, ws_port = call(h, "POST", "/ports", { port = 8770 })
      local _, st_port = call(h, "POST", "/ports", { port = 8771 })
      local c = assert(core.ws.connect{ url = ws_port.url:gsub("^http", "ws") .. "socket", deadline_ms = 30000 })
      for i = 1, 20 do assert.is_true(c:send("m" .. i)) end
      for i = 1, 20 do assert.equal("echo:m" .. i, c:recv{ deadline_ms = 30000 }) end
      local big = ("xyz"):rep(100000)
      assert.is_true(c:send(big))
      assert.equal("echo:" .. big, c:recv{ deadline_ms = 30000 })
      c:close()
      -- one left open: the server's stop ends it (drain, then its connection closed) and exits 0
      local open_ws = assert(core.ws.connect{ url = ws_port.url:gsub("^http", "ws") .. "kept", deadline_ms = 30000 })
      assert.is_true(open_ws:send("still here"))
      assert.equal("echo:still here", open_ws:recv{ deadline_ms = 30000 })
      -- streamed: the first part reaches the client before the upstream wrote the second
      local t0, first_at = core.now_ms(), nil
      local chunks = {}
      local st, hd = core.http.request{ url = st_port.url, deadline_ms = 30000, on_chunk = function(chunk)
        chunks[#chunks + 1] = chunk
        first_at = first_at or core.now_ms()
      end }
      assert.equal(200, st)
      assert.equal("first,second", table.concat(chunks))
      assert.truthy(first_at - t0 < 900, ("the first part came after %.0f ms"):format(first_at - t0))
      assert.equal("chunked", hd["transfer-encoding"])
      -- upstream connections are kept alive between requests, and one the server closed while
      -- idle (keepAliveTimeout 100 ms here) is replaced without the client seeing it
      local conns = start(h, "exec node -e \"const srv=require('http').createServer((q,s)=>s.end('ok'));"
        .. "srv.keepAliveTimeout=100;srv.on('connection',()=>console.log('connection'));srv.listen(8772,'127.0.0.1')\"")
      until_ok(h, "curl -sS -o /dev/null http://127.0.0.1:8772/")
      assert.equal(200, (call(h, "DELETE", "/ports/8770"))) -- (max_ports = 2 here)
      local _, ka_port = call(h, "POST", "/ports", { port = 8772 })
      local function connections()
        local _, logs = call(h, "GET", "/processes/" .. conns.id .. "/logs")
        local n = 0
        for _ in logs.stdout:gmatch("connection") do n = n + 1 end
        return n
      end
      local before = connections()
      for _ = 1, 5 do assert.equal(200, (core.http.request{ url = ka_port.url, deadline_ms = 30000 })) end
      -- (the server's log line comes through its pipe: waited for, not assumed)
      assert.truthy(S.wait_for(function() return connections() == before + 1 end, 10000), "not one connection")
      assert.equal(before + 1, connections())
      core.sleep(2000) -- past the upstream's keep-alive timeout, within the pool's
      assert.equal(200, (core.http.request{ url = ka_port.url, deadline_ms = 30000 }))
      assert.truthy(S.wait_for(function() return connections() == before + 2 end, 10000), tostring(connections()))
      h:stop()
      assert.equal(0, h:wait().exit, h.log():sub(-3000))
    end)
  end)

  it("answers smuggling, an oversized head and a slow peer on a preview URL as on /exec; a reader that stops is let go", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local server = start(h, "exec /usr/bin/python3 -u -m http.server 8780 --bind 127.0.0.1")
      start(h, "exec node -e \"require('http').createServer((q,s)=>{const b=Buffer.alloc(1<<20,97);"
        .. "let n=0;const more=()=>{while(n<64){n++;if(!s.write(b))return s.once('drain',more)}s.end()};"
        .. "more()}).listen(8781,'127.0.0.1')\"")
      until_ok(h, "curl -sS -o /dev/null http://127.0.0.1:8780/ && curl -sS -o /dev/null http://127.0.0.1:8781/")
      local _, exposed = call(h, "POST", "/ports", { port = 8780 })
      local _, big = call(h, "POST", "/ports", { port = 8781 })
      local prefix = exposed.url:match("^http://[^/]+(/ports/%x+/)$")
      local big_prefix = big.url:match("^http://[^/]+(/ports/%x+/)$")
      local auth = "Authorization: Bearer " .. S.TOKEN .. "\\r\\nX-Thread-Key: " .. THREAD .. "\\r\\n"
      local cases = {
        { "smuggling (CL and TE)", function(path)
          return { "send:POST " .. path .. "smuggled HTTP/1.1\\r\\nHost: t\\r\\n" .. auth
            .. "Content-Length: 6\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET /x HTTP/1.1\\r\\n\\r\\n", "read" } end },
        { "an oversized head", function(path)
          return { "send:GET " .. path .. " HTTP/1.1\\r\\nHost: t\\r\\nX-Big: ", "fill:8000:a", "send:\\r\\n\\r\\n", "read" } end },
        { "a slow peer", function(path)
          return { "trickle:300:GET " .. path .. "slow HTTP/1.1\\r\\nHost: t\\r\\nX-Slow: abcdefghij\\r\\n\\r\\n", "read" } end },
      }
      for _, c in ipairs(cases) do
        local on_exec = status_of(probe(h.port, c[2]("/exec")))
        local on_port = status_of(probe(h.port, c[2](prefix)))
        assert.is_number(on_exec, c[1])
        assert.truthy(on_exec >= 400, c[1] .. ": " .. on_exec)
        assert.equal(on_exec, on_port, c[1])
        print(("%s: %d on /exec, %d on a preview URL"):format(c[1], on_exec, on_port))
      end
      -- a wrong token is refused at the head: a body it announces is never waited for or read
      local wrong = probe(h.port, { "send:POST /ports/" .. ("0"):rep(32) .. "/ HTTP/1.1\\r\\nHost: t\\r\\n"
        .. "Content-Length: 5000000\\r\\n\\r\\n", "read" })
      assert.equal(404, status_of(wrong))
      -- none of them reached the server in the instance
      local _, logs = call(h, "GET", "/processes/" .. server.id .. "/logs")
      assert.is_nil((logs.stdout .. logs.stderr):find("smuggled", 1, true), logs.stderr)
      assert.is_nil((logs.stdout .. logs.stderr):find("GET /x", 1, true), logs.stderr)
      assert.is_nil((logs.stdout .. logs.stderr):find("slow", 1, true), logs.stderr)
      -- a client that asks for 64 MiB and reads none of it is let go after request_timeout_ms
      -- (1 s here), and its upstream connection with it; the server goes on answering
      local out, st = probe(h.port, { "send:GET " .. big_prefix .. " HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n", "sleep:4000", "read" }, 20000)
      assert.truthy(#out < 64 * 1024 * 1024, "the whole answer went to a client that did not read")
      -- the line comes through sandboxd's stderr pipe, which a loaded host may read after the
      -- probe's end: waited for
      assert.truthy(S.wait_for(function() return h.log():find("http.slow_peer", 1, true) end, 30000),
        st .. "\n" .. h.log():sub(-2000))
      local ok_status = core.http.request{ url = exposed.url, deadline_ms = 30000 }
      assert.equal(200, ok_status)
      h:stop()
      assert.equal(0, h:wait().exit, h.log():sub(-3000))
    end)
  end)

  it("a process holds its instance awake up to process_awake_ms, then ends, and the instance sleeps; the host-per-port form", function()
    core.run(function()
      local short = policies.dir{
        timeouts = function(src)
          -- 15 s awake: the preview server below, then the idle 2 s beside the second process,
          -- must fit in it on a loaded machine (6 s left 4 s for a start and a GET beside stress-ng)
          return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"1s\"\nsandbox.process_awake_ms = 15 * second\n"
            .. "sandbox.ports_host_url = \"http://{token}.preview.test\"\n"
        end,
        isolation = function(src)
          return src .. ("\nuid_base = %d\nuid_count = 64\nspare_instances = 0\n"):format(UID_BASE)
        end,
      }
      local h = S.start_sandboxd{ policies = short }
      -- the host-per-port form: the whole path goes to the server, found by the Host
      local web = start(h, "exec /usr/bin/python3 -u -m http.server 8000 --bind 127.0.0.1")
      until_ok(h, "curl -sS -o /dev/null http://127.0.0.1:8000/")
      exec(h, "mkdir -p assets && echo app > assets/app.js")
      local _, exposed = call(h, "POST", "/ports", { port = 8000 })
      local token = exposed.url:match("^http://(%x+)%.preview%.test/$")
      assert.truthy(token, exposed.url)
      local st, _, body = core.http.request{ url = h.url .. "/assets/app.js", deadline_ms = 30000,
        headers = { host = token .. ".preview.test" } }
      assert.equal(200, st, body)
      assert.equal("app\n", body)
      st = core.http.request{ url = h.url .. "/assets/app.js", deadline_ms = 30000,
        headers = { host = ("0"):rep(32) .. ".preview.test" } }
      assert.equal(404, st)
      call(h, "DELETE", "/processes/" .. web.id)
      local t0 = core.now_ms()
      local p = start(h, "trap '' TERM; echo up; exec sleep 600")
      -- idle (sleep_after 1 s) while it runs, yet awake: it is not killed before its limit
      local function record()
        local _, d = call(h, "GET", "/processes")
        for _, x in ipairs(d.processes) do
          if x.id == p.id then return x end
        end
      end
      core.sleep(2000)
      assert.equal("running", record().status)
      assert.is_nil(h.log():find("sandboxd.instance_slept", 1, true))
      local ended = S.wait_for(function()
        local x = record()
        return x.status ~= "running" and x
      end, 60000)
      assert.truthy(ended, "the process outlived process_awake_ms")
      assert.equal("killed", ended.status)
      assert.equal("awake-limit", ended.reason)
      assert.truthy(core.now_ms() - t0 >= 15000)
      -- then the instance sleeps on idle
      assert.truthy(S.wait_for(function() return h.log():find("sandboxd.instance_slept", 1, true) end, 30000))
      -- the instance a process wakes has the network the request asks, as /exec's would
      local st0, pn = call(h, "POST", "/processes", { command = "exec sleep 600", network = "none" }, "netless")
      assert.equal(201, st0)
      local st1, d1 = call(h, "POST", "/exec", { command = "true", network = "none" }, "netless")
      assert.equal(200, st1)
      assert.equal(0, d1.exitCode, d1.error)
      local st2 = call(h, "POST", "/processes", { command = "true", network = "host" }, "netless")
      assert.equal(409, st2)
      call(h, "DELETE", "/processes/" .. pn.id, nil, "netless")
      -- the thread's next request wakes a new instance; a process of an instance that ends
      -- (here a command kills every process of it) ends with it and is recorded killed
      local q = start(h, "exec sleep 600")
      exec(h, "kill -9 -1; sleep 5")
      local gone = S.wait_for(function()
        local _, d = call(h, "GET", "/processes")
        for _, x in ipairs(d.processes) do
          if x.id == q.id and x.status ~= "running" then return x end
        end
      end, 30000)
      assert.truthy(gone, "the process outlived its instance")
      assert.equal("killed", gone.status)
      h:stop()
      assert.equal(0, h:wait().exit, h.log():sub(-3000))
    end)
  end)

  it("follows a process's output as NDJSON until it ends", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local p = start(h, "echo one; sleep 1; echo two; exit 4")
      local chunks = {}
      local st = S.call(h.url, "/processes/" .. p.id .. "/logs?follow=1", { method = "GET", thread = THREAD,
        on_chunk = function(c) chunks[#chunks + 1] = c end })
      assert.equal(200, st)
      local lines = {}
      for line in table.concat(chunks):gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(line) end
      local text = ""
      for _, l in ipairs(lines) do if l.stream == "stdout" then text = text .. l.data end end
      assert.equal("one\ntwo\n", text)
      assert.same({ status = "exited", exitCode = 4 }, lines[#lines])
      -- a follower that stops reading while the process writes 20 MB: what waits for it is the
      -- newest output and a {dropped} line, never an unbounded queue; one that takes none of it
      -- for request_timeout_ms (1 s here) is let go, and the server goes on
      local loud = start(h, "sleep 1; seq 1 3000000")
      local out = probe(h.port, { "send:GET /processes/" .. loud.id .. "/logs?follow=1 HTTP/1.1\\r\\nHost: t\\r\\n"
        .. "Authorization: Bearer " .. S.TOKEN .. "\\r\\nX-Thread-Key: " .. THREAD .. "\\r\\nConnection: close\\r\\n\\r\\n",
        "sleep:4000", "read" }, 30000)
      assert.truthy(out:find('"dropped":%d+'), out:sub(1, 300))
      assert.truthy(#out < 20 * 1024 * 1024, "the whole output went to a follower that did not read")
      assert.truthy(S.wait_for(function() return h.log():find("http.slow_peer", 1, true) end, 30000),
        h.log():sub(-2000)) -- through sandboxd's stderr pipe: waited for
      assert.equal(200, (call(h, "GET", "/processes")))
      h:stop()
      assert.equal(0, h:wait().exit, h.log():sub(-3000))
    end)
  end)
end)
