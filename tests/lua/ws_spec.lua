-- core.ws, the WebSocket client (src/ws/ws.c), against a real WebSocket server
-- (tests/support/ws_peer.py on python3-websockets).
local core = require("switchboard.core")
local async = require("support.async")

local PYTHON = "/usr/bin/python3"

local function start_peer(extra)
  local peer = { out = "" }
  -- --watch: the peer ends when this process does, even if a spec failed before its teardown
  local argv = { PYTHON, "tests/support/ws_peer.py", "--watch", tostring(require("support.procs").self_pid()) }
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  peer.proc = assert(core.spawn{
    argv = argv, env = { PATH = "/usr/bin:/bin" },
    on_output = function(stream, chunk) if stream == "stdout" then peer.out = peer.out .. chunk end end,
  })
  local deadline = core.now_ms() + 30000
  while not peer.out:match("READY (%d+)") do
    assert(core.now_ms() < deadline, "the WebSocket peer did not start")
    core.sleep(20)
  end
  peer.port = tonumber(peer.out:match("READY (%d+)"))
  function peer.url(path) return ("ws://127.0.0.1:%d%s"):format(peer.port, path) end
  function peer.closed(path)
    local deadline2 = core.now_ms() + 30000
    while true do
      local code = peer.out:match("CLOSED " .. path:gsub("%p", "%%%0") .. " (%S+)")
      if code then return code end
      assert(core.now_ms() < deadline2, "the peer never saw " .. path .. " close")
      core.sleep(20)
    end
  end
  return peer
end

describe("core.ws", function()
  local peer
  before_each(async(function() peer = start_peer() end))
  after_each(async(function()
    peer.proc:kill("KILL")
    peer.proc:wait()
  end))

  it("connects, sends, receives in order and closes cleanly", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/echo"), deadline_ms = 10000 })
    assert.equals("open", c:state())
    for i = 1, 50 do assert.is_true(c:send("m" .. i)) end
    for i = 1, 50 do assert.equals("echo:m" .. i, c:recv{ deadline_ms = 10000 }) end
    local big = string.rep("xyz", 100000)
    c:send(big)
    assert.equals("echo:" .. big, c:recv{ deadline_ms = 10000 })
    c:close()
    assert.equals("1000", peer.closed("/echo"))
    local msg, err = c:recv()
    assert.is_nil(msg)
    assert.equals("closed", err.kind)
    local ok, serr = c:send("late")
    assert.is_nil(ok)
    assert.truthy(serr.kind)
  end))

  it("joins a fragmented message", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/fragments"), deadline_ms = 10000 })
    local m = assert(c:recv{ deadline_ms = 10000 })
    assert.equals(300000, #m)
    assert.equals(string.rep("a", 100000) .. string.rep("b", 100000) .. string.rep("c", 100000), m)
    c:close()
  end))

  it("closes a connection whose message exceeds max_message", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/fragments"), deadline_ms = 10000, max_message = 150000 })
    local m, err = c:recv{ deadline_ms = 10000 }
    assert.is_nil(m)
    assert.matches("exceeded 150000 bytes", err.message)
  end))

  it("reports the peer's close code", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/echo"), deadline_ms = 10000 })
    c:send("close:4009")
    local m, err = c:recv{ deadline_ms = 10000 }
    assert.is_nil(m)
    assert.equals("closed", err.kind)
    assert.equals(4009, err.code)
    assert.is_true(core.is_error(err))
  end))

  it("gives up a recv at its deadline or its signal, and the connection stays usable", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/echo"), deadline_ms = 10000 })
    local t0 = core.now_ms()
    local m, err = c:recv{ deadline_ms = 200 }
    assert.is_nil(m)
    assert.equals("timeout", err.kind)
    assert.is_true(core.now_ms() - t0 >= 150)
    local sig = core.signal()
    core.go(function() core.sleep(50); sig:abort("enough") end)
    m, err = c:recv{ signal = sig }
    assert.is_nil(m)
    assert.equals("aborted", err.kind)
    c:send("still")
    assert.equals("echo:still", c:recv{ deadline_ms = 10000 })
    c:close()
  end))

  it("answers pings with pongs", async(function()
    local c = assert(core.ws.connect{ url = peer.url("/silent"), deadline_ms = 10000 })
    assert.is_nil(c:last_pong_ms())
    c:ping()
    local deadline = core.now_ms() + 10000
    while not c:last_pong_ms() and core.now_ms() < deadline do core.sleep(10) end
    assert.is_truthy(c:last_pong_ms())
    c:close()
  end))

  it("fails as values: refused, rejected upgrade, bad URL, deadline", async(function()
    local c, err = core.ws.connect{ url = "ws://127.0.0.1:1/x", deadline_ms = 10000 }
    assert.is_nil(c)
    assert.equals("transport", err.kind)
    assert.is_true(core.is_error(err))
    c, err = core.ws.connect{ url = peer.url("/reject"), deadline_ms = 10000 }
    assert.is_nil(c)
    assert.equals("transport", err.kind)
    c, err = core.ws.connect{ url = "http://127.0.0.1/x" }
    assert.is_nil(c)
    assert.equals("invalid", err.kind)
    -- a listener that never answers the handshake: the deadline ends the wait
    local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, handler = function() core.sleep(5000) end })
    local t0 = core.now_ms()
    c, err = core.ws.connect{ url = ("ws://127.0.0.1:%d/slow?ticket=SECRET"):format(srv.port), deadline_ms = 300 }
    assert.is_nil(c)
    assert.equals("timeout", err.kind)
    assert.is_true(core.now_ms() - t0 < 4000)
    assert.is_nil(err.message:find("SECRET", 1, true))
    srv:close()
  end))

  it("raises for programmer errors", async(function()
    assert.has_error(function() core.ws.connect("ws://x") end)
    local c = assert(core.ws.connect{ url = peer.url("/echo"), deadline_ms = 10000 })
    assert.has_error(function() c:close(5) end)
    assert.has_error(function() c:send({}) end)
    c:close()
  end))
end)

describe("core.ws over TLS", function()
  it("verifies the server's certificate against the system's trust store", async(function()
    local tmp = require("support.tmp")
    local dir = tmp.dir("wss")
    local gen = assert(core.spawn{ argv = { "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
      "-keyout", dir .. "/k.pem", "-out", dir .. "/c.pem", "-days", "2", "-subj", "/CN=localhost",
      "-addext", "subjectAltName=DNS:localhost" }, env = { PATH = "/usr/bin:/bin" } }):wait()
    assert.equals(0, gen.exit, gen.stderr)
    local peer = start_peer({ "--tls", dir .. "/c.pem", dir .. "/k.pem" })
    local url = ("wss://localhost:%d/echo"):format(peer.port)
    -- not trusted (a self-signed certificate): refused as a value
    local c, err = core.ws.connect{ url = url, deadline_ms = 10000 }
    assert.is_nil(c)
    assert.equals("transport", err.kind)
    -- trusted through OpenSSL's SSL_CERT_FILE, in a child with that environment
    local probe = [[
      package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
      local core = require("switchboard.core")
      core.run(function()
        local c = assert(core.ws.connect{ url = os.getenv("WS_URL"), deadline_ms = 10000 })
        c:send("over tls")
        io.write(assert(c:recv{ deadline_ms = 10000 }))
        c:close()
      end)
    ]]
    local r = assert(core.spawn{ argv = { "lua5.4", "-e", probe },
      env = require("support.preload").env{ PATH = "/usr/bin:/bin", SSL_CERT_FILE = dir .. "/c.pem", WS_URL = url,
                                             SB_BUILD_DIR = os.getenv("SB_BUILD_DIR") } }):wait()
    assert.equals(0, r.exit, r.stderr)
    assert.equals("echo:over tls", r.stdout)
    peer.proc:kill("KILL")
    peer.proc:wait()
    tmp.remove_all()
  end))
end)
