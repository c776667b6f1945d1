-- Black-box: `switchboard sandboxd` tells its service manager ready, reloading and stopping
-- through $NOTIFY_SOCKET (sd_notify(3); deploy/systemd/switchboard-sandboxd.service is
-- Type=notify). A real unix datagram socket stands in for systemd's (tests/support/
-- notify_socket.py), which also reports each sender's pid as the kernel gave it.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")

local policies_dir = S.policy_dir()

-- Starts the listener on PATH (a file path or "@abstract"); returns a handle with .messages().
local function start_listener(path, dir)
  local out = dir .. "/notify.jsonl"
  local proc = assert(core.spawn{ argv = { "/usr/bin/python3", "tests/support/notify_socket.py", path, out },
    env = S.base_env() })
  assert(S.wait_for(function() return S.read(out .. ".ready") end, 60000), "the notify socket did not bind") -- python3 starting on a loaded machine
  local h = { proc = proc }
  function h.messages()
    local list = {}
    for line in ((S.read(out) or "")):gmatch("[^\n]+") do list[#list + 1] = cjson.decode(line) end
    return list
  end
  -- waits for the n-th message; returns it
  function h.nth(n, ms)
    return S.wait_for(function() return h.messages()[n] end, ms or 20000)
  end
  function h.stop() os.execute("kill " .. proc.pid .. " 2>/dev/null"); proc:wait() end
  return h
end

after_each(S.cleanup_servers)

describe("sandboxd under a service manager (NOTIFY_SOCKET)", function()
  it("says READY=1 once it answers, RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 on SIGTERM", function()
    core.run(function()
      local dir = S.tmpdir()
      local listener = start_listener(dir .. "/notify.sock", dir)
      local sb = S.start_sandboxd{ policies = policies_dir, env = { NOTIFY_SOCKET = dir .. "/notify.sock" } }

      local ready = assert(listener.nth(1), "no READY=1 arrived:\n" .. sb.log())
      assert.equal(sb.pid, ready.pid) -- from the main process, as NotifyAccess=main requires
      assert.truthy(ready.text:match("^READY=1\nSTATUS=listening on 127%.0%.0%.1:" .. sb.port .. ","), ready.text)
      assert.equal(200, (S.call(sb.url, "/healthz"))) -- it really answers when it says so

      local before = core.notify.monotonic_usec()
      sb:stop("HUP")
      local reloading = assert(listener.nth(2), "no RELOADING=1 arrived:\n" .. sb.log())
      local after = core.notify.monotonic_usec()
      local usec = tonumber(reloading.text:match("^RELOADING=1\nMONOTONIC_USEC=(%d+)$"))
      assert.truthy(usec, reloading.text)
      -- systemd reads MONOTONIC_USEC on its own CLOCK_MONOTONIC: it must be the same clock.
      assert.truthy(usec >= before and usec <= after, ("%d not in [%d, %d]"):format(usec, before, after))
      local again = assert(listener.nth(3), "no READY=1 after the reload:\n" .. sb.log())
      assert.truthy(again.text:match("^READY=1\nSTATUS=policies "), again.text)
      assert.equal(sb.pid, again.pid)

      sb:stop("TERM")
      local stopping = assert(listener.nth(4), "no STOPPING=1 arrived:\n" .. sb.log())
      assert.equal("STOPPING=1", stopping.text)
      assert.equal(0, sb:wait().exit)
      assert.equal(4, #listener.messages())
      listener.stop()
      S.rm(dir)
    end)
  end)

  it("reaches an abstract-namespace socket (@name), as systemd may pass", function()
    core.run(function()
      local dir = S.tmpdir()
      local name = "@switchboard-notify-spec-" .. core.crypto.hex(core.crypto.random_bytes(6))
      local listener = start_listener(name, dir)
      local sb = S.start_sandboxd{ policies = policies_dir, env = { NOTIFY_SOCKET = name } }
      local ready = assert(listener.nth(1), "no READY=1 arrived:\n" .. sb.log())
      assert.truthy(ready.text:find("READY=1", 1, true))
      sb:stop("TERM")
      assert.equal(0, sb:wait().exit)
      listener.stop()
      S.rm(dir)
    end)
  end)

  it("keeps serving when the socket is unusable, and says so once in the log", function()
    core.run(function()
      local dir = S.tmpdir()
      local sb = S.start_sandboxd{ policies = policies_dir, env = { NOTIFY_SOCKET = dir .. "/nobody-listens" } }
      assert.equal(200, (S.call(sb.url, "/healthz")))
      sb:stop("HUP")
      assert.truthy(S.wait_for(function() return sb.log():find("sandboxd.reload", 1, true) end, 10000))
      local _, warnings = sb.log():gsub("notify%.failed", "")
      assert.equal(1, warnings, sb.log())
      sb:stop("TERM")
      assert.equal(0, sb:wait().exit)
      S.rm(dir)
    end)
  end)

  it("sends nothing and logs nothing without NOTIFY_SOCKET", function()
    core.run(function()
      local sb = S.start_sandboxd{ policies = policies_dir }
      assert.equal(200, (S.call(sb.url, "/healthz")))
      sb:stop("TERM")
      assert.equal(0, sb:wait().exit)
      assert.falsy(sb.log():find("notify", 1, true), sb.log())
    end)
  end)
end)

describe("the resident under a service manager (NOTIFY_SOCKET)", function()
  it("says READY=1 once it answers, RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 on SIGTERM", function()
    core.run(function()
      local R = require("support.resident")
      local dir = S.tmpdir()
      local listener = start_listener(dir .. "/notify.sock", dir)
      local base = R.make_base()
      local rs = R.start(base, { policies = R.policy_dir(), env = { NOTIFY_SOCKET = dir .. "/notify.sock" } })
      local ready = assert(listener.nth(1), "no READY=1 arrived:\n" .. rs.log())
      assert.equal(rs.pid, ready.pid)
      assert.truthy(ready.text:match("^READY=1\nSTATUS=listening on 127%.0%.0%.1:" .. rs.port .. ","), ready.text)
      assert.equal(200, (S.call(rs.url, "/healthz"))) -- it really answers when it says so
      rs.stop("HUP")
      assert.truthy(assert(listener.nth(2), "no RELOADING=1:\n" .. rs.log()).text:match("^RELOADING=1\nMONOTONIC_USEC=%d+$"))
      assert.truthy(assert(listener.nth(3), "no READY=1 after the reload:\n" .. rs.log()).text:match("^READY=1\nSTATUS=policies "))
      rs.stop("TERM")
      assert.equal("STOPPING=1", assert(listener.nth(4), "no STOPPING=1:\n" .. rs.log()).text)
      assert.equal(0, rs.wait().exit)
      assert.equal(4, #listener.messages())
      listener.stop()
      S.rm(dir)
      S.rm(base)
    end)
  end)
end)

describe("the console under a service manager (NOTIFY_SOCKET)", function()
  it("says READY=1 when it reads asks, RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 on SIGTERM", function()
    core.run(function()
      local dir = S.tmpdir()
      local listener = start_listener(dir .. "/notify.sock", dir)
      -- stdin stays open (a pipe from sleep) so the console keeps reading until it is told to stop
      local shell = assert(core.spawn{
        argv = { "bash", "-c", 'sleep 60 | "$BIN" --policies "$POL" console' },
        env = S.base_env{ BIN = S.BIN, POL = policies_dir, NOTIFY_SOCKET = dir .. "/notify.sock",
                          SWITCHBOARD_STATE_DIR = dir, HOME = dir },
      })
      local ready = assert(listener.nth(1), "no READY=1 from the console")
      assert.truthy(ready.text:match("^READY=1\nSTATUS=reading asks from standard input"), ready.text)
      local console_pid = assert(math.tointeger(ready.pid)) -- the console, a child of our shell
      os.execute("kill -HUP " .. console_pid)
      assert.truthy(assert(listener.nth(2)).text:match("^RELOADING=1\nMONOTONIC_USEC=%d+$"))
      assert.truthy(assert(listener.nth(3)).text:match("^READY=1\nSTATUS=policies "))
      os.execute("kill -TERM " .. console_pid)
      assert.equal("STOPPING=1", assert(listener.nth(4)).text)
      os.execute("kill " .. shell.pid .. " 2>/dev/null")
      shell:wait()
      listener.stop()
      S.rm(dir)
    end)
  end)
end)
