-- core.http.request against real loopback peers (tests/support/http_peer.py), driven by the
-- real engine. Timing bounds are deliberately generous: they tell "at the deadline" from
-- "never" and "at once" from "at the deadline", nothing finer.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local cjson = require("cjson")

local PEER = "tests/support/http_peer.py"

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "command failed: " .. cmd)
end

local read_file = require("support.files").read

-- Starts a peer as a real subprocess and waits (on the loop) for its port file.
local function start_peer(opts)
  opts = opts or {}
  local dir = require("support.tmp").dir("peer")
  local flags = opts.unix and " --unix" or ""
  if opts.tls then flags = flags .. " --tls " .. opts.tls end
  -- --watch: the peer ends when this process does, even if a spec failed before its teardown
  sh(string.format("/usr/bin/python3 %s --dir %s%s --watch %d >%s/log 2>&1 &", PEER, dir, flags,
    require("support.procs").self_pid(), dir))
  local port
  core.run(function()
    local t0 = core.now_ms()
    repeat
      port = read_file(dir .. "/port")
      if not port then core.sleep(10) end
    until port or core.now_ms() - t0 > 180000 -- the port file ends the wait: python starts slowly on a loaded machine
  end)
  assert(port, "the peer did not start: " .. (read_file(dir .. "/log") or ""))
  local peer = {
    dir = dir,
    pid = tonumber(read_file(dir .. "/pid")),
    port = tonumber(port),
    sock = dir .. "/peer.sock",
    tls_port = tonumber(read_file(dir .. "/tls_port") or ""),
  }
  peer.base = "http://127.0.0.1:" .. peer.port
  return peer
end

local function stop_peer(peer)
  if peer then
    os.execute("kill -9 " .. peer.pid .. " 2>/dev/null")
    os.execute("rm -rf " .. peer.dir)
  end
end

-- Runs fn as the main task of a fresh core.run.
local function run(fn)
  return core.run(fn)
end

local function elapsed_since(t0) return core.now_ms() - t0 end

describe("core.http.request", function()
  local peer

  setup(function() peer = start_peer({unix = true}) end)
  teardown(function() stop_peer(peer) end)

  describe("round trips", function()
    it("GETs with the caller's headers and nothing libcurl would add", function()
      run(function()
        local status, headers, body = core.http.request{
          url = peer.base .. "/echo?x=1", headers = {["X-Thread-Key"] = "t1", authorization = "Bearer tok"},
          deadline_ms = 5000,
        }
        assert.equal(200, status)
        assert.equal("application/json", headers["content-type"])
        local doc = cjson.decode(body)
        assert.equal("GET", doc.method)
        assert.equal("/echo?x=1", doc.path)
        assert.equal("t1", doc.headers["x-thread-key"])
        assert.equal("Bearer tok", doc.headers["authorization"])
        -- Exactly Host plus what we gave: no Accept, User-Agent, Content-Type or Expect.
        table.sort(doc.header_names)
        assert.same({"Host", "X-Thread-Key", "authorization"}, doc.header_names)
      end)
    end)

    it("POSTs a body as given, with a content-length and no 100-continue wait", function()
      run(function()
        local big = string.rep("y", 2 * 1024 * 1024) -- above libcurl's Expect threshold
        for _, body in ipairs({'{"command":"true"}', "", big}) do
          local status, _, answer = core.http.request{
            method = "POST", url = peer.base .. "/echo", body = body,
            headers = {["content-type"] = "application/json"}, deadline_ms = 10000,
          }
          assert.equal(200, status)
          local doc = cjson.decode(answer)
          assert.equal("POST", doc.method)
          assert.equal(#body, #doc.body)
          assert.is_true(doc.body == body)
          assert.equal(tostring(#body), doc.headers["content-length"])
          assert.equal("application/json", doc.headers["content-type"])
          assert.is_nil(doc.headers["expect"])
        end
      end)
    end)

    it("sends other methods, with and without a body", function()
      run(function()
        local _, _, body = core.http.request{method = "PUT", url = peer.base .. "/echo", body = "abc"}
        local doc = cjson.decode(body)
        assert.equal("PUT", doc.method)
        assert.equal("abc", doc.body)
        _, _, body = core.http.request{method = "DELETE", url = peer.base .. "/echo"}
        assert.equal("DELETE", cjson.decode(body).method)
        local status, headers, head_body = core.http.request{method = "HEAD", url = peer.base .. "/echo"}
        assert.equal(200, status)
        assert.equal("42", headers["content-length"])
        assert.equal("", head_body)
      end)
    end)

    it("passes status codes through as values", function()
      run(function()
        for _, code in ipairs({404, 503, 500, 401}) do
          local status, _, body = core.http.request{url = peer.base .. "/status/" .. code}
          assert.equal(code, status)
          assert.equal("status " .. code, body)
        end
      end)
    end)

    it("lower-cases header names and joins repeated ones", function()
      run(function()
        local status, headers = core.http.request{url = peer.base .. "/dup"}
        assert.equal(200, status)
        assert.equal("a=1, b=2", headers["set-cookie"])
        assert.equal("Value", headers["x-mixed-case"])
        assert.is_nil(headers["X-Mixed-Case"])
      end)
    end)

    it("reuses the connection for sequential requests to the same peer", function()
      run(function()
        local _, _, a = core.http.request{url = peer.base .. "/echo"}
        local _, _, b = core.http.request{url = peer.base .. "/echo"}
        assert.equal(cjson.decode(a).client_port, cjson.decode(b).client_port)
      end)
    end)

    it("streams a heartbeat body to on_chunk and still returns it whole", function()
      run(function()
        local chunks = {}
        local status, _, body = core.http.request{
          method = "POST", url = peer.base .. "/exec?beats=4&ms=20", body = "{}", deadline_ms = 5000,
          on_chunk = function(bytes) chunks[#chunks + 1] = bytes end,
        }
        assert.equal(200, status)
        assert.equal(table.concat(chunks), body)
        assert.is_true(#chunks >= 2)
        local doc = cjson.decode(body) -- leading whitespace is valid JSON
        assert.equal(0, doc.exitCode)
        assert.equal("    ", body:sub(1, 4))
      end)
    end)

    it("keeps going when on_chunk raises (the error is logged)", function()
      run(function()
        local raised = false
        local status, _, body = core.http.request{
          url = peer.base .. "/exec?beats=2&ms=10", deadline_ms = 5000,
          on_chunk = function()
            if not raised then
              raised = true
              error("on_chunk raising on purpose (this log line is expected)")
            end
          end,
        }
        assert.is_true(raised)
        assert.equal(200, status)
        assert.equal(0, cjson.decode(body).exitCode)
      end)
    end)

    it("talks over a unix socket", function()
      run(function()
        local status, _, body = core.http.request{
          method = "POST", url = "http://sandbox/echo", unix_socket = peer.sock, body = "via unix",
        }
        assert.equal(200, status)
        assert.equal("via unix", cjson.decode(body).body)
        local ok, err = core.http.request{url = "http://sandbox/echo", unix_socket = peer.dir .. "/absent.sock"}
        assert.is_nil(ok)
        assert.equal("transport", err.kind)
        assert.matches("absent.sock", err.message, 1, true)
      end)
    end)

    it("completes 200 parallel requests from 200 tasks, each with its own answer", function()
      run(function()
        local n, results, left = 200, {}, 200
        local main = core.current()
        for i = 1, n do
          core.go(function()
            local status, _, body = core.http.request{
              -- the answers end the wait; the bound is for a loaded machine (200 at once on one peer)
              method = "POST", url = peer.base .. "/echo?i=" .. i, body = "body " .. i, deadline_ms = 120000,
            }
            results[i] = status == 200 and cjson.decode(body) or {error = body}
            left = left - 1
            if left == 0 then core.wake(main) end
          end)
        end
        core.suspend()
        for i = 1, n do
          assert.equal("/echo?i=" .. i, results[i].path)
          assert.equal("body " .. i, results[i].body)
        end
      end)
    end)
  end)

  describe("failures", function()
    it("times out a peer that never answers, at the deadline", function()
      run(function()
        local t0 = core.now_ms()
        local status, err = core.http.request{url = peer.base .. "/hang", deadline_ms = 300}
        local took = elapsed_since(t0)
        assert.is_nil(status)
        assert.equal("timeout", err.kind)
        assert.matches("300 ms", err.message, 1, true)
        assert.matches("127.0.0.1:" .. peer.port, err.message, 1, true)
        assert.is_true(took >= 290, "fired early: " .. took)
        assert.is_true(took < 10000, "fired late: " .. took) -- the peer hangs for good: not never
      end)
    end)

    it("times out a body that heartbeats forever, at the deadline, after seeing the spaces", function()
      run(function()
        local seen = {}
        local t0 = core.now_ms()
        local status, err = core.http.request{
          -- long enough for the peer's beats to arrive on a loaded machine (it beats forever)
          method = "POST", url = peer.base .. "/heartbeat?ms=30", body = "{}", deadline_ms = 2000,
          on_chunk = function(bytes) seen[#seen + 1] = bytes end,
        }
        local took = elapsed_since(t0)
        assert.is_nil(status)
        assert.equal("timeout", err.kind)
        assert.is_true(#seen >= 2, "saw " .. #seen .. " chunks")
        assert.equal(string.rep(" ", #table.concat(seen)), table.concat(seen))
        -- at the deadline, not never: the body would go on for good
        assert.is_true(took >= 1990 and took < 30000, "took " .. took)
      end)
    end)

    it("reports a peer killed with SIGKILL mid-body as a transport error at once", function()
      local victim = start_peer()
      run(function()
        local seen = 0
        core.go(function()
          while seen == 0 do core.sleep(10) end
          core.sleep(100)
          os.execute("kill -9 " .. victim.pid)
        end)
        local t0 = core.now_ms()
        local status, err = core.http.request{
          method = "POST", url = victim.base .. "/heartbeat?ms=20", body = "{}", deadline_ms = 20000,
          on_chunk = function() seen = seen + 1 end,
        }
        local took = elapsed_since(t0)
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.is_true(seen >= 1)
        assert.is_true(took < 10000, "took " .. took .. " ms against a 20 s deadline") -- under half of it
      end)
      -- Nothing listens there now: connection refused.
      run(function()
        local status, err = core.http.request{url = victim.base .. "/echo", deadline_ms = 5000}
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.matches("127.0.0.1:" .. victim.port, err.message, 1, true)
      end)
      stop_peer(victim)
    end)

    it("reports a peer that dies by itself mid-body as a transport error", function()
      local victim = start_peer()
      run(function()
        local t0 = core.now_ms()
        local status, err = core.http.request{url = victim.base .. "/die?beats=3&ms=20", deadline_ms = 20000}
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.is_true(elapsed_since(t0) < 10000) -- under half of the 20 s deadline
      end)
      stop_peer(victim)
    end)

    it("never returns a truncated body as a success", function()
      run(function()
        for _, route in ipairs({"/truncated-chunked", "/truncated-length"}) do
          local status, err = core.http.request{url = peer.base .. route, deadline_ms = 5000}
          assert.is_nil(status, route)
          assert.equal("transport", err.kind, route)
        end
      end)
    end)

    it("reports connection refused as transport", function()
      run(function()
        local status, err = core.http.request{url = "http://127.0.0.1:1/x", deadline_ms = 5000}
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.matches("127.0.0.1:1", err.message, 1, true)
      end)
    end)

    it("refuses a body over max_body, and accepts one exactly at it", function()
      run(function()
        local status, err = core.http.request{url = peer.base .. "/big?n=100001", max_body = 100000}
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.matches("max_body", err.message, 1, true)
        local ok, _, body = core.http.request{url = peer.base .. "/big?n=100000", max_body = 100000}
        assert.equal(200, ok)
        assert.equal(100000, #body)
      end)
    end)

    it("refuses schemes other than http and https", function()
      run(function()
        local status, err = core.http.request{url = "file:///etc/passwd"}
        assert.is_nil(status)
        assert.equal("transport", err.kind)
      end)
    end)

    it("verifies TLS certificates (a self-signed peer is refused)", function()
      local dir = require("support.tmp").dir("tls")
      sh(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        .. "-keyout %s/k.pem -out %s/c.pem >/dev/null 2>&1 && cat %s/k.pem %s/c.pem > %s/both.pem",
        dir, dir, dir, dir, dir))
      local tls_peer = start_peer({tls = dir .. "/both.pem"})
      run(function()
        local status, err = core.http.request{
          -- the refusal ends the wait; a handshake on a loaded machine took over 5 s
          url = "https://127.0.0.1:" .. tls_peer.tls_port .. "/echo", deadline_ms = 60000,
        }
        assert.is_nil(status)
        assert.equal("transport", err.kind)
        assert.matches("certificate", err.message:lower(), 1, true)
      end)
      stop_peer(tls_peer)
      os.execute("rm -rf " .. dir)
    end)

    it("never puts header values or the body in a failure message", function()
      run(function()
        local secret_headers = {authorization = "Bearer S3CRET-HEADER"}
        local secret_body = '{"env":{"GH_TOKEN":"S3CRET-BODY"}}'
        for _, url in ipairs({peer.base .. "/hang", "http://127.0.0.1:1/", peer.base .. "/truncated-chunked"}) do
          local status, err = core.http.request{
            method = "POST", url = url, headers = secret_headers, body = secret_body, deadline_ms = 200,
          }
          assert.is_nil(status)
          assert.is_nil(err.message:find("S3CRET", 1, true), err.message)
        end
      end)
    end)
  end)

  describe("abort signals", function()
    it("aborts a waiting request at once", function()
      run(function()
        local sig = core.signal()
        core.go(function()
          core.sleep(100)
          sig:abort("hard stop")
        end)
        local t0 = core.now_ms()
        local status, err = core.http.request{url = peer.base .. "/hang", deadline_ms = 20000, signal = sig}
        local took = elapsed_since(t0)
        assert.is_nil(status)
        assert.equal("aborted", err.kind)
        assert.equal("hard stop", err.reason)
        assert.is_true(took < 10000, "took " .. took) -- under half of the 20 s deadline
      end)
    end)

    it("aborts mid-body, from inside on_chunk", function()
      run(function()
        local sig = core.signal()
        local chunks = 0
        local status, err = core.http.request{
          url = peer.base .. "/heartbeat?ms=10", deadline_ms = 20000, signal = sig,
          on_chunk = function()
            chunks = chunks + 1
            if chunks == 2 then sig:abort("enough") end
          end,
        }
        assert.is_nil(status)
        assert.equal("aborted", err.kind)
        assert.equal(2, chunks)
      end)
    end)

    it("aborts through a parent signal", function()
      run(function()
        local parent = core.signal()
        local child = core.signal(parent)
        core.go(function()
          core.sleep(50)
          parent:abort("parent stop")
        end)
        local status, err = core.http.request{url = peer.base .. "/hang", deadline_ms = 20000, signal = child}
        assert.is_nil(status)
        assert.equal("aborted", err.kind)
        assert.equal("parent stop", err.reason)
      end)
    end)

    it("returns at once when the signal already fired", function()
      run(function()
        local sig = core.signal()
        sig:abort("early")
        local status, err = core.http.request{url = peer.base .. "/hang", deadline_ms = 20000, signal = sig}
        assert.is_nil(status)
        assert.equal("aborted", err.kind)
      end)
    end)

    it("ignores a signal that fires after the request completed", function()
      run(function()
        local sig = core.signal()
        local status = core.http.request{url = peer.base .. "/echo", signal = sig}
        assert.equal(200, status)
        sig:abort("too late")
        assert.equal(200, (core.http.request{url = peer.base .. "/echo"}))
      end)
    end)

    it("leaves other requests alone", function()
      run(function()
        local sig = core.signal()
        local other
        core.go(function()
          local status, _, body = core.http.request{url = peer.base .. "/exec?beats=5&ms=40", deadline_ms = 5000}
          other = {status, body}
        end)
        core.go(function()
          core.sleep(50)
          sig:abort()
        end)
        local status, err = core.http.request{url = peer.base .. "/hang", deadline_ms = 20000, signal = sig}
        assert.is_nil(status)
        assert.equal("aborted", err.kind)
        while not other do core.sleep(10) end
        assert.equal(200, other[1])
        assert.equal(0, cjson.decode(other[2]).exitCode)
      end)
    end)
  end)

  describe("process hygiene", function()
    it("creates its sockets close-on-exec", function()
      run(function()
        local pid = read_file("/proc/self/stat"):match("^(%d+)")
        local checked = 0
        core.go(function()
          core.http.request{url = peer.base .. "/hang", deadline_ms = 500}
        end)
        core.sleep(150)
        local listing = io.popen("ls -l /proc/" .. pid .. "/fd"):read("a")
        for fd in listing:gmatch("(%d+) %-> socket:") do
          local info = read_file("/proc/" .. pid .. "/fdinfo/" .. fd)
          if info then
            local flags = tonumber(info:match("flags:%s*(%d+)"), 8)
            assert.is_true(flags & 0x80000 ~= 0, "fd " .. fd .. " is not close-on-exec")
            checked = checked + 1
          end
        end
        assert.is_true(checked >= 1, "no socket found to check")
        core.sleep(500) -- let the request time out before core.run returns
      end)
    end)

    it("drops in-flight requests cleanly when the Lua state closes", function()
      local script = string.format([[
        package.cpath = %q .. "/lua/?.so;" .. package.cpath
        local core = require("switchboard.core")
        core.run(function()
          for i = 1, 5 do
            core.go(function() core.http.request{url = %q, deadline_ms = 60000} end)
          end
          core.sleep(100)
        end)
        os.exit(7, true) -- closes the state with the requests still waiting
      ]], build, peer.base .. "/hang")
      local t0 = os.time()
      local ok, how, code = os.execute(require("support.preload").shell_prefix() .. "lua5.4 -e '" .. script:gsub("'", "'\\''") .. "'")
      assert.equal("exit", how)
      assert.equal(7, code)
      assert.is_true(os.time() - t0 < 30) -- under half of the requests' 60 s deadline: not waited out
    end)

    it("raises on programmer errors", function()
      assert.has_error(function() core.http.request{url = peer.base .. "/echo"} end)
      run(function()
        assert.has_error(function() core.http.request{} end)
        assert.has_error(function() core.http.request{url = "http://x/", headers = {a = "b\r\nc: d"}} end)
        assert.has_error(function() core.http.request{url = "http://x/", headers = {["bad name"] = "v"}} end)
        assert.has_error(function() core.http.request{url = "http://x/", method = "GET /"} end)
        assert.has_error(function() core.http.request{url = "http://x/", deadline_ms = 0} end)
        assert.has_error(function() core.http.request{url = "http://x/", max_body = -1} end)
        assert.has_error(function() core.http.request{url = "http://x/", body = {}} end)
      end)
    end)
  end)
end)
