-- `switchboard exec` and `switchboard version` as a user runs them.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local bin = require("support.bin")
local procs = require("support.procs")
local cjson = require("cjson")

describe("switchboard exec", function()
  local root
  before_each(function() root = tmp.dir("cli") end)
  after_each(function() tmp.remove_all() end)

  local function exec(args, opts)
    local argv = { "exec", "--workspace-root", root }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return bin.run(argv, opts)
  end

  it("against a port nobody listens on, says that nothing ran (not that it may still be running)", async(function()
    -- a port that was just free: a server bound to it and closed again
    local srv = core.http.serve{ host = "127.0.0.1", port = 0, handler = function(_, res) res:send(500) end }
    local port = srv.port
    srv:close()
    local r = exec({ "--backend", "sandbox", "--sandbox-url", "http://127.0.0.1:" .. port, "--", "echo hi" },
      { env = { SANDBOX_TOKEN = "exec-spec-token" } })
    assert.are.equal(125, r.exit, r.stderr)
    assert.truthy(r.stderr:find("sandboxd /exec: nothing ran — no connection could be made", 1, true), r.stderr)
    assert.truthy(r.stderr:find("start the sandboxd there or correct the URL", 1, true), r.stderr)
    assert.is_nil(r.stderr:find("may still be running", 1, true), r.stderr)
  end))

  it("prints the tool result and exits with the command's status", async(function()
    local r = exec({ "--", "echo", "hello" })
    assert.are.equal(0, r.exit)
    assert.are.equal("hello\n", r.stdout)
    r = exec({ "--", "echo oops >&2; exit 7" })
    assert.are.equal(7, r.exit)
    assert.are.equal("exit 7: oops\n", r.stdout)
    r = exec({ "--", "true" })
    assert.are.equal("(no output)\n", r.stdout)
  end))

  it("--timeout-ms 1000 -- sleep 60 exits 124 after about a second, naming the limit",
    async(function()
      local t0 = core.now_ms()
      local r = exec({ "--timeout-ms", "1000", "--", "sleep", "60" })
      local took = core.now_ms() - t0
      assert.are.equal(124, r.exit)
      assert.truthy(r.stdout:find("^exit 124: command timed out"))
      assert.truthy(r.stdout:find("timeoutMs", 1, true))
      assert.truthy(r.stdout:find("1200000", 1, true))
      -- a generous bound (a loaded machine), still far from the command's own 60 s
      assert.is_true(took > 900 and took < 30000, "took " .. took)
    end))

  it("follow-ups in a thread share its workspace", async(function()
    exec({ "--thread", "t1", "--", "echo hi > marker.txt" })
    assert.are.equal("hi\n", exec({ "--thread", "t1", "--", "cat marker.txt" }).stdout)
    assert.are.equal(1, exec({ "--thread", "t2", "--", "test -e marker.txt" }).exit)
  end))

  it("SIGTERM stops the command's whole group and exits 130", async(function()
    local pid_file = root .. "/bg.pid"
    local p = bin.start({ "exec", "--workspace-root", root, "--", "sleep 60 & echo $! > " .. pid_file .. "; wait" })
    -- the event, not a guess: the background child exists once its pid is written
    local pid
    local t0 = core.now_ms()
    while pid == nil and core.now_ms() - t0 < 30000 do
      local f = io.open(pid_file, "r")
      pid = f and tonumber(f:read("l") or "")
      if f then f:close() end
      if pid == nil then core.sleep(20) end
    end
    assert.truthy(pid, "the command never started")
    p:kill("TERM")
    local r = p:wait()
    assert.are.equal(130, r.exit)
    t0 = core.now_ms()
    while procs.alive(pid) and core.now_ms() - t0 < 30000 do core.sleep(20) end
    assert.is_false(procs.alive(pid))
  end))

  it("a no-repository agent is refused with its own status and a legible reason",
    async(function()
      local r = exec({ "--agent", "general", "--", "ls" })
      assert.are.equal(126, r.exit)
      assert.truthy(r.stderr:find("declares no repository", 1, true))
    end))

  it("an infrastructure failure has its own status", async(function()
    local r = bin.run({ "exec", "--workspace-root", "/proc/no-such/dir", "--", "true" })
    assert.are.equal(125, r.exit)
    assert.truthy(r.stderr:find("workspace", 1, true))
  end))

  it("usage errors say what to do", async(function()
    local r = exec({ "echo" })
    assert.are.equal(2, r.exit)
    assert.truthy(r.stderr:find("after `--`", 1, true))
    r = exec({ "--bogus", "--", "true" })
    assert.are.equal(2, r.exit)
    assert.truthy(r.stderr:find("unknown option --bogus", 1, true))
    r = bin.run({ "exec", "--help" })
    assert.are.equal(0, r.exit)
    assert.truthy(r.stdout:find("Examples:", 1, true))
  end))

  it("every command answers --help with examples", async(function()
    for _, cmd in ipairs({ "exec", "version" }) do
      local r = bin.run({ cmd, "--help" })
      assert.are.equal(0, r.exit, cmd)
      assert.truthy(r.stdout:find("Usage: switchboard " .. cmd, 1, true), cmd)
    end
    local r = bin.run({ "--help" })
    assert.are.equal(0, r.exit)
    assert.truthy(r.stdout:find("Commands:", 1, true))
  end))
end)

describe("switchboard version", function()
  it("prints the stamp of the tree it was built from", async(function()
    local r = bin.run({ "version", "--json" })
    assert.are.equal(0, r.exit)
    local stamp = cjson.decode(r.stdout)
    local f = io.popen("git rev-parse HEAD 2>/dev/null")
    local head = f:read("l")
    f:close()
    if head then
      -- exactly the commit the tree was at (scripts/test builds right before it tests)
      assert.truthy(stamp.commit == head or stamp.commit == head .. "-dirty",
        ("built from %s, the tree is at %s: rebuild"):format(stamp.commit, head))
      assert.truthy(stamp.builtAt:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"))
    end
    assert.truthy(bin.run({ "version" }).stdout:find("switchboard " .. stamp.commit, 1, true))
  end))
end)
