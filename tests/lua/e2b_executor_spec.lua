-- The e2b executor (docs/contract.md#e2b, docs/e2b.md) against the E2B stand-in
-- (tests/support/e2b_standin.py), a real process on loopback speaking E2B's REST API and envd's
-- Connect protocol, running the commands for real. Policy numbers are scaled down.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local E = require("support.e2b")
local S = require("support.sandbox")
local procs = require("support.procs")
local errors = require("switchboard.exec.errors")
local factory = require("switchboard.exec.factory")

local FAST = S.FAST .. [[
e2b.sandbox_timeout_ms = 20 * second
e2b.api_timeout_ms = 5 * second
e2b.keepalive_ping_ms = 1 * second
e2b.connect_grace_ms = 200
e2b.stop_timeout_ms = 5 * second
]]

local snap = S.snapshot(FAST)
local function policy() return snap end

local h -- the stand-in, shared by the file (each test uses threads of its own)
local n = 0
local function executor(opts)
  opts = opts or {}
  n = n + 1
  opts.policy = opts.policy or policy
  opts.thread_key = opts.thread_key or ("thread-" .. n)
  return E.executor(h, opts)
end

local function requests_to(path_pattern, method)
  local out = {}
  for _, r in ipairs(h.requests()) do
    if r.path:find(path_pattern) and (method == nil or r.method == method) then out[#out + 1] = r end
  end
  return out
end

-- The Start request's decoded envelope.
local function start_body(r)
  local raw = core.crypto.base64_decode(r.body_b64)
  local len = string.unpack(">I4", raw, 2)
  return cjson.decode(raw:sub(6, 5 + len))
end

-- A command that leaves a background child in its group and writes its pid to bg.pid.
local BG = "sleep 30 & echo $! > bg.pid; "

local function bg_pid(ex)
  local raw = E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 30000)
  return tonumber((assert(raw, "bg.pid was never written"):match("%d+")))
end

setup(function() core.run(function() h = E.start() end) end)
teardown(function() core.run(function() h:stop() end); S.cleanup() end)

describe("e2b executor: the control plane", function()
  it("creates one sandbox per thread (template, timeout, metadata, no env) and reuses it", async(function()
    local before = #requests_to("^/sandboxes$", "POST")
    local ex = executor()
    assert.equal("hi", ex:exec("echo hi").text)
    assert.equal("again", ex:exec("echo again").text)
    local creates = requests_to("^/sandboxes$", "POST")
    assert.equal(before + 1, #creates)
    local body = cjson.decode(creates[#creates].body)
    assert.equal("base", body.templateID)
    assert.equal(20, body.timeout)
    assert.is_true(body.autoPause) -- idle sleep pauses it (issue 37): its files wait for the thread
    assert.same({}, body.envVars)
    assert.equal("coding", body.metadata.agent)
    assert.truthy(body.metadata.switchboard_thread)
    assert.equal(E.KEY, creates[#creates].headers["x-api-key"])
    local other = executor()
    other:exec("true")
    assert.are_not.equal(ex:sandbox_id(), other:sandbox_id())
  end))

  it("sends the key only to the control plane and the command's env only in the Start body", async(function()
    local resolved = 0
    local ex = executor{ resolve_envs = function() resolved = resolved + 1; return { GH_TOKEN = "ghs_" .. resolved } end }
    assert.equal("ghs_1", ex:exec("printf %s \"$GH_TOKEN\"").text)
    assert.equal("ghs_2", ex:exec("printf %s \"$GH_TOKEN\"").text)
    local starts = requests_to("^/process%.Process/Start$")
    local last = starts[#starts]
    assert.same({ GH_TOKEN = "ghs_2" }, start_body(last).process.envs)
    assert.is_nil(last.headers["x-api-key"])
    for name, value in pairs(last.headers) do
      assert.is_nil(value:find("ghs_", 1, true), name)
    end
    local sb = h:sandbox(ex:sandbox_id())
    assert.truthy(sb)
    assert.equal("application/connect+json", last.headers["content-type"])
    assert.equal("1", last.headers["connect-protocol-version"])
    assert.equal("1", last.headers["keepalive-ping-interval"])
    assert.equal(ex:sandbox_id(), last.headers["e2b-sandbox-id"])
    assert.truthy(last.headers["x-access-token"])
  end))

  it("a refused API key is infra (http 401) naming the variable, never the key", async(function()
    local ex = E.executor(h, { policy = policy, key = "e2b_00000000", thread_key = "bad-key" })
    local r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("http 401", err.code)
    assert.matches("E2B refused the API key", err.message)
    assert.matches("E2B_API_KEY", err.message)
    assert.is_nil(err.message:find("e2b_00000000", 1, true))
  end))

  it("an unreachable control plane is infra naming the route, not the key", async(function()
    local ex = require("switchboard.exec.e2b").new{
      api_key = E.KEY, thread_key = "unreachable", policy = policy,
      getenv = h:getenv{ E2B_API_URL = "http://127.0.0.1:1" },
    }
    local r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("infra", err.code)
    assert.matches("E2B API POST /sandboxes request failed", err.message)
    assert.is_nil(err.message:find(E.KEY, 1, true))
  end))

  it("a 5xx on create is infra with the status as its code", async(function()
    h:faults{ { on = "create", status = 503, body = { code = 503, message = "placement failed" } } }
    local r, err = executor():exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("http 503", err.code)
    assert.matches("placement failed", err.message)
  end))

  it("a full account (429) waits and re-sends, then capacity once the wait is spent", async(function()
    h:faults{ { on = "create", status = 429, body = { code = 429, message = "concurrent sandboxes limit" } } }
    local r = assert(executor():exec("echo after-wait"))
    assert.equal("after-wait", r.text)
    local many = {}
    for i = 1, 6 do many[i] = { on = "create", status = 429, body = { code = 429, message = "limit" } } end
    h:faults(many)
    local t0 = core.now_ms()
    local r2, err = executor():exec("echo never")
    assert.is_nil(r2)
    assert.is_true(errors.is_capacity(err))
    assert.is_false(errors.is_infra(err))
    assert.equal(3000, err.waited_ms)
    assert.matches("E2B sandbox limit reached", err.message)
    assert.is_true(core.now_ms() - t0 >= 3000)
    -- the faults left over would hit later tests' creates
    for _ = 1, 2 do executor():exec("true") end
  end))

  it("release(\"always\") deletes the sandbox; \"if-clean\" keeps it for the thread", async(function()
    local ex = executor()
    ex:exec("echo hi")
    local id = ex:sandbox_id()
    assert.is_true(ex:release("if-clean"))
    assert.same({}, ex:take_notes())
    assert.is_true(h:sandbox(id).alive)
    assert.equal("still", ex:exec("echo still").text)
    assert.equal(id, ex:sandbox_id())
    assert.is_true(ex:release("always"))
    assert.is_false(h:sandbox(id).alive)
    assert.equal(1, #requests_to("^/sandboxes/" .. id .. "$", "DELETE"))
    -- the card says the workspace went with it
    local notes = ex:take_notes()
    assert.equal(1, #notes)
    assert.matches("workspace not kept: the thread's E2B sandbox " .. id .. " was deleted", notes[1])
    assert.equal("fresh", ex:exec("echo fresh").text)
    assert.are_not.equal(id, ex:sandbox_id())
  end))

  it("a remembered sandbox is reconnected by a later executor; reclaimed, it is replaced with a notice", async(function()
    local dir = S.tmpdir()
    local key = "remembered-" .. n
    local first = executor{ state_dir = dir, thread_key = key }
    first:exec("echo one > marker")
    local id = first:sandbox_id()
    local second = executor{ state_dir = dir, thread_key = key }
    assert.equal("one", second:exec("cat marker").text)
    assert.equal(id, second:sandbox_id())
    assert.equal(1, #requests_to("^/sandboxes/" .. id .. "/connect$", "POST"))
    h:vanish(id)
    local third = executor{ state_dir = dir, thread_key = key }
    local r = assert(third:exec("cat marker"))
    assert.equal(1, r.exit_code)
    assert.matches("previous E2B sandbox " .. id .. " was reclaimed", r.text)
    assert.are_not.equal(id, third:sandbox_id())
    S.rm(dir)
  end))

  it("a sandbox past its timeout is paused, not killed, and the next command resumes it with its files", async(function()
    local short = S.snapshot(FAST .. "\ne2b.sandbox_timeout_ms = 2 * second\n")
    local ex = executor{ policy = function() return short end }
    -- the commands' own limits are the policy's: a new sandbox lives sandbox_timeout_ms
    -- whatever the command's limit, so no limit of the spec's has to fit inside 2 s
    assert(ex:exec("echo one > marker"))
    local created_by = core.now_ms() -- the executor counted the sandbox's 2 s from before this
    local id = ex:sandbox_id()
    assert.is_true(E.wait_for(function() return h:sandbox(id).paused end, 10000), "E2B's timeout did not pause it")
    assert.is_true(h:sandbox(id).alive)
    -- past its timeout by the executor's clock too (E2B's clock ran out first)
    assert.is_true(E.wait_for(function() return core.now_ms() >= created_by + 2000 end, 10000))
    local connects = #requests_to("^/sandboxes/" .. id .. "/connect$", "POST")
    local r = assert(ex:exec("cat marker"))
    assert.equal(0, r.exit_code)
    assert.equal("one", r.text)
    assert.equal(id, ex:sandbox_id())
    assert.is_false(h:sandbox(id).paused)
    assert.equal(connects + 1, #requests_to("^/sandboxes/" .. id .. "/connect$", "POST"))
    assert.same({}, ex:take_notes())
  end))

  it("a paused sandbox whose timeout E2B counted first is resumed, not declared gone", async(function()
    -- the executor's clock says the sandbox still runs; E2B's paused it: /timeout is 404 for a
    -- paused sandbox, and the connect after it resumes it
    local ex = executor()
    assert(ex:exec("echo two > marker"))
    local id = ex:sandbox_id()
    h:pause(id)
    local r = assert(ex:exec("cat marker", { timeout_ms = 60000 }))
    assert.equal("two", r.text)
    assert.equal(id, ex:sandbox_id())
    assert.equal(1, #requests_to("^/sandboxes/" .. id .. "/connect$", "POST"))
  end))

  it("a paused sandbox E2B no longer has is replaced by a fresh one; the result and the card say so", async(function()
    local short = S.snapshot(FAST .. "\ne2b.sandbox_timeout_ms = 2 * second\n")
    local ex = executor{ policy = function() return short end }
    assert(ex:exec("echo one > marker"))
    local created_by = core.now_ms()
    local id = ex:sandbox_id()
    assert.is_true(E.wait_for(function() return h:sandbox(id).paused end, 10000))
    h:expire(id) -- E2B's retention of paused sandboxes ran out
    assert.is_true(E.wait_for(function() return core.now_ms() >= created_by + 2000 end, 10000))
    local r = assert(ex:exec("cat marker"))
    assert.equal(1, r.exit_code)
    assert.matches("previous E2B sandbox " .. id .. " was reclaimed: E2B could not resume it", r.text)
    assert.are_not.equal(id, ex:sandbox_id())
    local notes = ex:take_notes()
    assert.equal(1, #notes)
    assert.matches("workspace not kept", notes[1])
    assert.matches(id, notes[1], 1, true)
    assert.same({}, ex:take_notes()) -- said once
  end))

  it("a command longer than the sandbox's timeout stretches it first", async(function()
    local ex = executor()
    ex:exec("true")
    local id = ex:sandbox_id()
    assert.equal(0, #requests_to("^/sandboxes/" .. id .. "/timeout$"))
    assert(ex:exec("true", { timeout_ms = 60000 }))
    local t = requests_to("^/sandboxes/" .. id .. "/timeout$")
    assert.equal(1, #t)
    assert.equal(60 + 1 + 20, cjson.decode(t[1].body).timeout)
  end))
end)

describe("e2b executor: the process stream", function()
  it("reads stdout, stderr and the exit code; a nonzero exit is a result", async(function()
    local ex = executor()
    local r = assert(ex:exec("echo out; echo err >&2; exit 3"))
    assert.equal(3, r.exit_code)
    assert.equal("exit 3: out\nerr", r.text)
    assert.equal("(no output)", assert(ex:exec("true")).text)
    local big = assert(ex:exec("head -c 200000 /dev/zero | tr '\\0' x"))
    assert.equal(200000, #big.stdout)
  end))

  it("reads keepalives before the start event and pings while a command is quiet", async(function()
    h:faults{ { on = "start", keepalives_first = 3 } }
    local ex = executor()
    local r = assert(ex:exec("sleep 2.2; echo woke"))
    assert.equal("woke", r.text)
  end))

  it("an end-of-stream frame with an error is infra naming it", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", end_error = { code = "internal", message = "envd lost the process" } } }
    local r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("infra", err.code)
    assert.matches("internal: envd lost the process", err.message)
  end))

  it("a stream that stops mid-command is infra, and the command's group is killed", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", cut_after_output = true } }
    local r, err = ex:exec(BG .. "echo started; sleep 30")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.matches("stream broke off after the command started", err.message)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 10000))
  end))

  it("a body that ends inside a frame, or a frame with unknown flags, is infra", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", cut_mid_frame = true } }
    local r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.matches("in the middle of a frame", err.message)
    h:faults{ { on = "start", bad_flags = 0x40 } }
    r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.matches("unknown envelope flags 0x40", err.message)
  end))

  it("a refused access token is infra (http 401); the next command reconnects", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", status = 401, body = { code = 401, message = "invalid access token" } } }
    local r, err = ex:exec("echo hi")
    assert.is_nil(r, r and r.text)
    assert.equal("http 401", err.code, err.message)
    assert.matches("refused its access token", err.message)
    assert.equal("back", ex:exec("echo back").text)
  end))

  it("a sandbox that disappeared is infra naming it; the next command starts a fresh one", async(function()
    local ex = executor()
    ex:exec("true")
    local id = ex:sandbox_id()
    h:vanish(id)
    local r, err = ex:exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.matches("E2B sandbox " .. id .. " is gone", err.message)
    assert.matches("re%-clone", err.message)
    assert.equal("fresh", ex:exec("echo fresh").text)
    assert.are_not.equal(id, ex:sandbox_id())
    -- the same under a running command: the stream breaks off
    h:faults{ { on = "start", vanish_after_ms = 300 } }
    r, err = ex:exec("sleep 30")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
  end))

  it("a stream that never ends is abandoned at the budget + margin (infra, timeout)", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", stall = true } }
    local t0 = core.now_ms()
    local r, err = ex:exec("echo hi", { timeout_ms = 500 })
    local took = core.now_ms() - t0
    assert.is_nil(r)
    assert.equal("timeout", err.code)
    assert.matches("gave no answer within 2s %(command budget 1s %+ 1s margin%)", err.message)
    -- not before budget + margin; and given up, not waited out (the stream stalls for good, so
    -- a client that never gave up would still be waiting at the spec's own bound)
    assert.is_true(took >= 1500 and took < 60000, tostring(took))
  end))
end)

describe("e2b executor: deadlines and stops", function()
  it("a deadline kill is exit 124 naming the limit, and the whole group is gone", async(function()
    -- the answer may come seconds past the limit on a loaded machine (the stand-in's kill and
    -- trailer): a margin this case never waits out
    local patient = S.snapshot(FAST .. "\ncall.margin_ms = 30 * second\n")
    local ex = executor{ policy = function() return patient end }
    local t0 = core.now_ms()
    -- the limit only has to outlast bash writing bg.pid (its first act: seconds to spare on a
    -- loaded machine) and stay under the child's 30 s
    local r = assert(ex:exec(BG .. "sleep 30", { timeout_ms = 5000 }))
    assert.is_true(core.now_ms() - t0 < 25000, "the deadline did not end the 30 s command")
    assert.equal(124, r.exit_code)
    assert.is_true(r.timed_out)
    assert.matches("command timed out in the E2B sandbox", r.text)
    assert.matches("5000 ms", r.text)
    assert.matches("timeoutMs", r.text)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 20000))
    local starts = requests_to("^/process%.Process/Start$")
    -- envd's own deadline is the backstop behind ours: limit + kill grace + connect grace
    assert.equal(tostring(5000 + 300 + 200), starts[#starts].headers["connect-timeout-ms"])
  end))

  it("a command that ignores TERM is killed after the grace, still 124", async(function()
    local r = assert(executor():exec("trap '' TERM; sleep 30", { timeout_ms = 500 }))
    assert.equal(124, r.exit_code)
    assert.matches("command timed out", r.text)
  end))

  it("a command's own exit 124 before its limit stays its own", async(function()
    -- a limit far past the stand-in's start of the command on a loaded machine: only the
    -- command's own 124 can end it
    local r = assert(executor():exec("exit 124", { timeout_ms = 60000 }))
    assert.equal(124, r.exit_code)
    assert.is_falsy(r.timed_out)
    assert.is_nil(r.text:find("timed out", 1, true))
  end))

  it("envd's deadline (deadline_exceeded in the trailer) reads as the same 124", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", end_error = { code = "deadline_exceeded", message = "context deadline exceeded" } } }
    local r = assert(ex:exec("echo hi", { timeout_ms = 1000 }))
    assert.equal(124, r.exit_code)
    assert.matches("command timed out in the E2B sandbox", r.text)
  end))

  it("a hard stop drops the stream at once and kills the group: a stop, never 124", async(function()
    local ex = executor()
    ex:exec("true")
    local stop, t_abort = core.signal(), nil
    core.go(function()
      E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 60000)
      t_abort = core.now_ms()
      stop:abort("stopped by the user")
    end)
    local r = assert(ex:exec(BG .. "sleep 30", { signal = stop }))
    assert.truthy(t_abort, "the command ended before the stop")
    -- under half of the 30 s command it must not wait for
    assert.is_true(core.now_ms() - t_abort < 15000, "the stop waited for the command")
    assert.is_true(r.aborted)
    assert.are_not.equal(124, r.exit_code)
    assert.matches("stopped by the user", r.text)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 20000))
    -- the stop was E2B's SendSignal SIGTERM to the wrapper (whose trap KILLs the group) — or,
    -- when it came before the start event was read (a loaded machine), the stop by the
    -- command's mark (its own case below makes that path certain)
    local e2b = require("switchboard.exec.e2b_envd") -- the wrapper and the stops
    local starts = requests_to("^/process%.Process/Start$")
    local last = start_body(starts[#starts]).process.args
    if last[2] == e2b.STOP_MARKED then
      assert.equal(e2b.WRAPPER, start_body(starts[#starts - 1]).process.args[2])
    else
      local sig = requests_to("^/process%.Process/SendSignal$")
      local body = cjson.decode(sig[#sig].body)
      assert.equal("SIGNAL_SIGTERM", body.signal)
      assert.equal(ex:sandbox_id(), sig[#sig].headers["e2b-sandbox-id"])
      assert.equal(e2b.WRAPPER, last[2])
    end
  end))

  it("nothing a command leaves behind outlives its normal end", async(function()
    local ex = executor()
    local r = assert(ex:exec(BG .. "echo done"))
    assert.equal("done", r.text)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 20000))
  end))
end)

describe("e2b executor: a stop before the start event", function()
  it("reaches the command by its mark: the group ends though the pid was never read", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "start", start_after_ms = 60000 } }
    local stop = core.signal()
    core.go(function()
      E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 60000)
      stop:abort("stopped by the user")
    end)
    local signals_before = #requests_to("^/process%.Process/SendSignal$")
    local r = assert(ex:exec(BG .. "sleep 30", { signal = stop }))
    assert.is_true(r.aborted)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 20000), "the background job survived the stop")
    assert.equal(signals_before, #requests_to("^/process%.Process/SendSignal$")) -- no pid to signal
    local starts = requests_to("^/process%.Process/Start$")
    local args = start_body(starts[#starts]).process.args
    assert.equal(require("switchboard.exec.e2b_envd").STOP_MARKED, args[2])
    assert.equal(start_body(starts[#starts - 1]).process.args[7], args[4]) -- the command's own mark
  end))
end)

describe("e2b executor: the stop's fallback", function()
  it("when SendSignal is refused, a process call sends the wrapper the TERM that ends the group", async(function()
    local ex = executor()
    ex:exec("true")
    h:faults{ { on = "signal", status = 500, body = { code = "internal", message = "envd busy" } } }
    local stop = core.signal()
    core.go(function()
      E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 60000)
      stop:abort("stopped by the user")
    end)
    local r = assert(ex:exec(BG .. "sleep 30", { signal = stop }))
    assert.is_true(r.aborted)
    local pid = bg_pid(ex)
    assert.is_true(E.wait_for(function() return not procs.alive(pid) end, 20000))
    -- the fallback's TERM from inside — or, when the stop came before the start event was read
    -- (a loaded machine), the stop by the command's mark, which needs no SendSignal at all
    local e2b = require("switchboard.exec.e2b_envd") -- the wrapper and the stops
    local starts = requests_to("^/process%.Process/Start$")
    local args = start_body(starts[#starts]).process.args
    assert.truthy(args[2] == e2b.STOP or args[2] == e2b.STOP_MARKED, args[2])
  end))
end)

describe("e2b executor: files", function()
  it("writes and reads back bytes under the workdir", async(function()
    local ex = executor()
    local bytes = "line\n\0binary\255"
    assert.is_true(ex:write_file("dir/sub/f.bin", bytes))
    assert.equal(bytes, ex:read_file("dir/sub/f.bin"))
    assert.equal(tostring(#bytes), ex:exec("wc -c < dir/sub/f.bin").text)
    assert.equal(bytes, ex:read_file("./dir/x/../sub/f.bin"))
    local w = requests_to("^/files%?path=", "POST")
    assert.equal("/files?path=/home/user/dir/sub/f.bin", w[#w].path)
  end))

  it("refuses escapes before any request; a missing file is a tool error", async(function()
    local ex = executor()
    local before = #h.requests()
    for _, p in ipairs({ "../x", "/etc/passwd", "a/../../x" }) do
      local got, err = ex:read_file(p)
      assert.is_nil(got)
      assert.is_true(errors.is_tool(err))
      assert.matches("outside the workspace", err.message)
      local ok, werr = ex:write_file(p, "x")
      assert.is_nil(ok)
      assert.matches("outside the workspace", werr.message)
    end
    assert.equal(before, #h.requests())
    local got, err = ex:read_file("nope.txt")
    assert.is_nil(got)
    assert.is_true(errors.is_tool(err))
    assert.matches("nope.txt does not exist", err.message)
  end))

  it("a file op on a sandbox that disappeared is infra naming it", async(function()
    local ex = executor()
    ex:exec("true")
    local id = ex:sandbox_id()
    h:vanish(id)
    local got, err = ex:read_file("x")
    assert.is_nil(got)
    assert.is_true(errors.is_infra(err))
    assert.matches("E2B sandbox " .. id .. " is gone", err.message)
  end))
end)

describe("e2b: the factory", function()
  local function build(env)
    return factory.make_executor({ policy = policy, force_backend = "e2b", workspace_root = "/nonexistent",
      getenv = function(name) return env[name] end }, { thread_key = "f", agent = "coding" })
  end

  it("a missing API key is a legible configuration error naming the variable", function()
    local sel, err = build({})
    assert.is_nil(sel)
    assert.matches("agent coding runs on the e2b backend, but E2B_API_KEY is not set", tostring(err))
  end)

  it("chooses the e2b executor with the key; an agent without a repository still gets null", async(function()
    local sel = assert(build(h:env()))
    assert.equal("e2b", sel.backend)
    assert.equal("e2b", sel.executor.backend)
    assert.equal("f", sel.executor:exec("echo f").text)
    local general = assert(factory.make_executor({ policy = policy, force_backend = "e2b",
      getenv = function() return nil end }, { thread_key = "g", agent = "general" }))
    assert.equal("local", general.backend)
  end))
end)
