-- The sandbox executor (docs/contract.md: #wire-protocol, #failure, #capacity,
-- #credential-transport, #timeouts).
-- Part 1 drives it with a scripted request function and a fake clock, so the shipped policy's
-- real numbers (10 s, 20 s, 30 s, 5 min, 330 s) are checked exactly and instantly. Part 2 runs
-- it over real loopback HTTP against the scripted stand-in (tests/support/sandbox_standin.py)
-- with the numbers scaled down through policy.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local sandbox = require("switchboard.exec.sandbox")
local errors = require("switchboard.exec.errors")
local health = require("switchboard.exec.health")
local policies = require("support.policies")

local shipped = policies.shipped()

local function ok_doc(over)
  local d = { stdout = "", stderr = "", exitCode = 0, durationMs = 3 }
  for k, v in pairs(over or {}) do d[k] = v end
  return { status = 200, body = d }
end

-- A fake transport: answers are {status, body (table → JSON; string as is), elapsed_ms} or
-- {fail = {kind, message}} or a function(req) → status, headers, body.
local function harness(answers, opts)
  opts = opts or {}
  local h = { sent = {}, slept = {}, clock = 0, resolved = 0 }
  local function request(req)
    local copy = {}
    for k, v in pairs(req) do copy[k] = v end
    h.sent[#h.sent + 1] = copy
    local a = table.remove(answers, 1)
    assert(a, "no scripted answer left for send #" .. #h.sent)
    if type(a) == "function" then return a(req) end
    h.clock = h.clock + (a.elapsed_ms or 5)
    if a.fail then return nil, a.fail end
    local body = a.body
    if type(body) == "table" then body = string.rep(" ", a.beats or 0) .. cjson.encode(body) end
    return a.status or 200, {}, body or ""
  end
  h.ex = sandbox.new{
    url = "http://sandboxd.test:1/", token = "tok-secret", thread_key = opts.thread_key or "C1:17.0001",
    policy = function() return opts.snap or shipped end,
    resolve_envs = opts.resolve_envs or function()
      h.resolved = h.resolved + 1
      return opts.envs or { GH_TOKEN = "ghs_" .. h.resolved }
    end,
    request = request,
    sleep = function(ms, signal)
      h.slept[#h.slept + 1] = ms
      if opts.on_sleep then opts.on_sleep(#h.slept, signal) end
      if signal and signal.aborted then return nil, { kind = "aborted" } end
      h.clock = h.clock + ms
      return true
    end,
    now_ms = function() return h.clock end,
  }
  function h.body(i) return cjson.decode(h.sent[i].body) end
  return h
end

local function header_names(req)
  local names = {}
  for k in pairs(req.headers) do names[#names + 1] = k end
  table.sort(names)
  return names
end

describe("sandbox executor: env transport (contract #credential-transport)", function()
  it("sends authorization, content-type and x-thread-key — nothing else — and the env in the body", function()
    local h = harness({ ok_doc(), { status = 200, body = { content = core.crypto.base64_encode("x"), encoding = "base64" } },
                        { status = 200, body = { ok = true } } })
    assert(h.ex:exec("echo hi"))
    assert(h.ex:read_file("a.txt"))
    assert(h.ex:write_file("b.txt", "bytes"))
    for i, route in ipairs({ "/exec", "/read", "/write" }) do
      local req = h.sent[i]
      assert.equal("http://sandboxd.test:1" .. route, req.url)
      assert.equal("POST", req.method)
      assert.same({ "authorization", "content-type", "x-thread-key" }, header_names(req))
      assert.equal("Bearer tok-secret", req.headers.authorization)
      assert.equal("application/json", req.headers["content-type"])
      assert.equal("C1:17.0001", req.headers["x-thread-key"])
      assert.same({ GH_TOKEN = "ghs_" .. i }, h.body(i).env)
      assert.is_nil(req.body:find("x-env", 1, true))
    end
    assert.same({ command = "echo hi", env = { GH_TOKEN = "ghs_1" } }, h.body(1))
    assert.same("b.txt", h.body(3).path)
    assert.equal("bytes", core.crypto.base64_decode(h.body(3).content))
    assert.equal("base64", h.body(3).encoding)
  end)

  it("an empty env is still the one body shape: env: {}", function()
    local h = harness({ ok_doc(), { status = 200, body = { content = "" } }, { status = 200, body = { ok = true } } },
      { envs = {} })
    h.ex:exec("true"); h.ex:read_file("f"); h.ex:write_file("f", "")
    for i = 1, 3 do assert.truthy(h.sent[i].body:find('"env":{}', 1, true), h.sent[i].body) end
  end)

  it("resolves the env on EVERY call and nothing at construction, so each command carries the credential current at its start", function()
    local h = harness({ ok_doc(), ok_doc(), ok_doc() })
    assert.equal(0, h.resolved)
    h.ex:exec("a"); h.ex:exec("b"); h.ex:exec("c")
    assert.equal(3, h.resolved)
    assert.same({ "ghs_1", "ghs_2", "ghs_3" }, { h.body(1).env.GH_TOKEN, h.body(2).env.GH_TOKEN, h.body(3).env.GH_TOKEN })
  end)

  it("a credential that cannot be resolved is infra and nothing is sent", function()
    local h = harness({}, { resolve_envs = function() return nil, "mint failed" end })
    local r, err = h.ex:exec("true")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("credentials for this command could not be resolved: mint failed", tostring(err))
    assert.equal(0, #h.sent)
  end)

  -- a bug is not caught here: it passes to the one catch of the caller's boundary (the
  -- dispatcher's), with where it happened; still nothing is sent
  it("a resolver that raises passes its raise through, and nothing is sent", function()
    local h = harness({}, { resolve_envs = function() error("boom") end })
    assert.has_error(function() h.ex:exec("true") end)
    assert.equal(0, #h.sent)
  end)

  it("a thread key the wire cannot carry is refused legibly before any send", function()
    local h = harness({}, { thread_key = "line\nbreak" })
    local r, err = h.ex:exec("true")
    assert.is_nil(r)
    assert.is_true(errors.is_tool(err))
    assert.truthy(err.message:find("x-thread-key", 1, true))
    assert.equal(0, #h.sent)
  end)
end)

describe("sandbox executor: per-call timeout and the per-send deadline (contract #timeouts)", function()
  it("sends timeoutMs only when asked, clamped", function()
    local h = harness({ ok_doc(), ok_doc(), ok_doc(), ok_doc() })
    h.ex:exec("a"); h.ex:exec("b", { timeout_ms = 25 * 60000 }); h.ex:exec("c", { timeout_ms = 0 })
    h.ex:exec("d", { timeout_ms = 600000 })
    assert.is_nil(h.body(1).timeoutMs)
    assert.equal(1200000, h.body(2).timeoutMs)
    assert.equal(1000, h.body(3).timeoutMs)
    assert.equal(600000, h.body(4).timeoutMs)
  end)

  it("every send waits budget + 30 s: no timeoutMs → 330 s; 20 min → 1230 s; a clamped 25-min ask → 1230 s; file ops 330 s", function()
    local h = harness({ ok_doc(), ok_doc(), ok_doc(), { status = 200, body = { content = "" } }, { status = 200, body = { ok = true } } })
    h.ex:exec("a"); h.ex:exec("b", { timeout_ms = 1200000 }); h.ex:exec("c", { timeout_ms = 1500000 })
    h.ex:read_file("f"); h.ex:write_file("f", "x")
    assert.same({ 330000, 1230000, 1230000, 330000, 330000 },
      { h.sent[1].deadline_ms, h.sent[2].deadline_ms, h.sent[3].deadline_ms, h.sent[4].deadline_ms, h.sent[5].deadline_ms })
  end)

  it("a send that gets no answer in time is ExecInfraError naming both numbers", function()
    local h = harness({ { fail = { kind = "timeout", message = "Operation timed out" } } })
    local r, err = h.ex:exec("sleep 400")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("timeout", err.code)
    assert.truthy(err.message:find("/exec gave no answer within 330s (command budget 300s + 30s margin)", 1, true), err.message)
    h = harness({ { fail = { kind = "timeout" } } })
    r, err = h.ex:exec("x", { timeout_ms = 1200000 })
    assert.truthy(err.message:find("within 1230s (command budget 1200s + 30s margin)", 1, true))
    h = harness({ { fail = { kind = "timeout" } } })
    r, err = h.ex:read_file("f")
    assert.truthy(err.message:find("/read gave no answer within 330s", 1, true))
  end)

  it("the hard stop aborts at once and is reported as the stop, never as a silent sandbox", function()
    local stop = core.signal()
    stop:abort("run stopped by the operator")
    local h = harness({ { fail = { kind = "aborted", message = "aborted" } } })
    local r = assert(h.ex:exec("sleep 100", { signal = stop }))
    assert.is_true(r.aborted)
    assert.truthy(r.text:find("[stopped: run stopped by the operator", 1, true), r.text)
    assert.is_nil(r.text:find("exit 124", 1, true))
  end)

  it("a run with little time left clips the budget and says so; inside the reserve nothing is sent", function()
    local h = harness({ ok_doc({ stdout = "x" }) })
    local r = assert(h.ex:exec("make", { remaining_ms = 120000 }))
    assert.equal(60000, h.body(1).timeoutMs)
    assert.equal(90000, h.sent[1].deadline_ms)
    assert.truthy(r.text:find("[timeout clipped to 60s", 1, true))
    h = harness({})
    local none, refusal = h.ex:exec("make", { remaining_ms = 30000 })
    assert.is_nil(none)
    assert.is_true(errors.is_refused(refusal))
    assert.equal(0, #h.sent)
  end)
end)

describe("sandbox executor: classification (contract #failure)", function()
  it("an empty-string in-body error is ExecInfraError after exactly one send — the failure shape with its text missing", function()
    for _, e in ipairs({ "", "   ", "\n\t" }) do
      local h = harness({ { status = 200, body = { error = e, stdout = "", stderr = "", exitCode = 127 } } })
      local r, err = h.ex:exec("true")
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.truthy(err.message:find("empty error", 1, true))
      assert.equal(1, #h.sent)
    end
  end)

  it("a body WITHOUT an error key and exit 127 with empty output is the normal `exit 127:` result", function()
    local h = harness({ ok_doc({ exitCode = 127 }) })
    local r = assert(h.ex:exec("foo 2>/dev/null"))
    assert.equal(127, r.exit_code)
    assert.equal("exit 127:", r.text)
  end)

  it("exit 0 with no error key and no output renders (no output)", function()
    local h = harness({ ok_doc() })
    assert.equal("(no output)", assert(h.ex:exec("true")).text)
  end)

  it("a nonzero exit is a result, never an error; a 124 from the server keeps its timeout line", function()
    local h = harness({ ok_doc({ exitCode = 2, stdout = "out\n", stderr = "err\n" }),
      ok_doc({ exitCode = 124, stderr = "command timed out in the sandbox after 280s (the command's limit, 280000 ms); if it needs longer, pass a larger timeoutMs (up to 1200000)" }) })
    assert.equal("exit 2: out\nerr", h.ex:exec("x").text)
    local r = h.ex:exec("sleep 320")
    assert.equal(124, r.exit_code)
    assert.truthy(r.text:find("^exit 124: command timed out in the sandbox after 280s"))
  end)

  it("any other in-body error is ExecInfraError after one send, with its text; an OLD server's bare Failed to create session: 503 too", function()
    for _, e in ipairs({ "Command execution failed", "Failed to create session: 503", "disk full" }) do
      local h = harness({ { status = 200, body = { error = e, stdout = "", stderr = e, exitCode = 127 } } })
      local r, err = h.ex:exec("true")
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.equal("infra", err.code)
      assert.truthy(err.message:find(e, 1, true))
      assert.equal(1, #h.sent)
    end
  end)

  it("a recycle-shaped failure more than a minute into the attempt is reworded; inside the minute it is left alone", function()
    local text = "The sandbox container stopped while the operation was pending."
    local h = harness({ { status = 200, elapsed_ms = 61000, body = { error = text, exitCode = 127, stdout = "", stderr = text } } })
    local _, err = h.ex:exec("npm test")
    assert.truthy(err.message:find("^sandbox recycled mid%-command after 61s — the container was replaced and /workspace is empty; re%-clone"), err.message)
    h = harness({ { status = 200, elapsed_ms = 5000, body = { error = text, exitCode = 127, stdout = "", stderr = text } } })
    _, err = h.ex:exec("npm test")
    assert.equal(text, err.message)
    -- a typed recycle error counts at any elapsed time
    h = harness({ { status = 200, elapsed_ms = 10, body = { error = "gone", name = "SessionTerminatedError", exitCode = 127 } } })
    _, err = h.ex:exec("x")
    assert.truthy(err.message:find("recycled mid-command", 1, true))
  end)

  it("a booting container is re-sent once after 3 s; twice is infra", function()
    local boot = { status = 200, body = { error = "Container is starting. Please retry in a moment.", exitCode = 127 } }
    local h = harness({ boot, ok_doc({ stdout = "ok" }) })
    assert.equal("ok", h.ex:exec("x").text)
    assert.same({ 3000 }, h.slept)
    assert.equal(h.sent[1].body, h.sent[2].body)
    h = harness({ boot, boot })
    local r, err = h.ex:exec("x")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal(2, #h.sent)
  end)

  it("a non-200 answer is infra with the status as the span code; a transport failure is infra at once", function()
    for _, status in ipairs({ 401, 400, 500, 502, 503 }) do
      local h = harness({ { status = status, body = { error = "nope" } } })
      local r, err = h.ex:exec("x")
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.equal("http " .. status, err.code)
      assert.truthy(err.message:find("HTTP " .. status, 1, true))
      assert.equal(1, #h.sent)
    end
    local h = harness({ { fail = { kind = "transport", message = "Connection refused (127.0.0.1:1)" } } })
    local r, err = h.ex:exec("x")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.truthy(err.message:find("Connection refused", 1, true))
  end)

  it("a 200 body that is not the protocol's document is infra", function()
    for _, body in ipairs({ "", "   ", "<html>", "[1]", '{"stdout":"x"}', '{"exitCode":"0"}' }) do
      local h = harness({ { status = 200, body = body } })
      local r, err = h.ex:exec("x")
      assert.is_nil(r, body)
      assert.is_true(errors.is_infra(err))
    end
  end)

  it("a heartbeat-padded document is read as one document", function()
    local h = harness({ { status = 200, beats = 40, body = { stdout = "late\n", stderr = "", exitCode = 0 } } })
    assert.equal("late", h.ex:exec("sleep 600").text)
  end)
end)

describe("sandbox executor: fleet-busy (contract #capacity)", function()
  local function busy(route)
    if route == "/exec" then
      return { status = 200, body = { error = "fleet-busy: no free sandbox (x)", reason = "fleet-busy", stdout = "", stderr = "x", exitCode = 127 } }
    end
    return { status = 503, body = { error = "fleet-busy: no free sandbox", reason = "fleet-busy" } }
  end

  it("re-sends the SAME route, body and headers after 10 s then 20 s and returns the eventual result", function()
    local h = harness({ busy("/exec"), busy("/exec"), ok_doc({ stdout = "done" }) })
    local r = assert(h.ex:exec("make"))
    assert.equal("done", r.text)
    assert.same({ 10000, 20000 }, h.slept)
    assert.equal(3, #h.sent)
    for i = 2, 3 do
      assert.equal(h.sent[1].url, h.sent[i].url)
      assert.equal(h.sent[1].body, h.sent[i].body) -- env included: resolved once per call
      assert.same(h.sent[1].headers, h.sent[i].headers)
      assert.equal(h.sent[1].deadline_ms, h.sent[i].deadline_ms) -- the deadline is per send
    end
    assert.equal(1, h.resolved)
  end)

  it("a /read answered HTTP 503 with reason fleet-busy is the same wait", function()
    local h = harness({ busy("/read"), { status = 200, body = { content = core.crypto.base64_encode("hello") } } })
    assert.equal("hello", h.ex:read_file("f"))
    assert.same({ 10000 }, h.slept)
  end)

  it("gives up once the total wait reaches the command's own budget and throws ExecCapacityError, not ExecInfraError", function()
    local answers = {}
    for _ = 1, 10 do answers[#answers + 1] = busy("/exec") end
    local h = harness(answers)
    local r, err = h.ex:exec("make", { timeout_ms = 60000 })
    assert.is_nil(r)
    assert.is_true(errors.is_capacity(err))
    assert.is_false(errors.is_infra(err))
    assert.same({ 10000, 20000, 30000 }, h.slept)
    assert.equal(4, #h.sent)
    assert.equal("sandbox fleet busy — no free per-thread sandbox after waiting 60s (the fleet's max_instances is reached); try again in a few minutes", err.message)
  end)

  it("never waits longer than 5 min, even for a 20-minute command; the default budget bounds a file op", function()
    local answers = {}
    for _ = 1, 20 do answers[#answers + 1] = busy("/exec") end
    local h = harness(answers)
    local _, err = h.ex:exec("make", { timeout_ms = 1200000 })
    assert.same({ 10000, 20000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000 }, h.slept)
    assert.equal(300000, err.waited_ms)
    assert.truthy(err.message:find("after waiting 300s", 1, true))
    answers = {}
    for _ = 1, 20 do answers[#answers + 1] = busy("/write") end
    h = harness(answers)
    local ok, werr = h.ex:write_file("f", "x")
    assert.is_nil(ok)
    assert.is_true(errors.is_capacity(werr))
    assert.equal(300000, werr.waited_ms)
  end)

  it("is matched by reason only: the fleet-busy text without the reason is ordinary infra after one send", function()
    local h = harness({ { status = 200, body = { error = "fleet-busy: no free sandbox", stdout = "", stderr = "x", exitCode = 127 } } })
    local _, err = h.ex:exec("x")
    assert.is_true(errors.is_infra(err))
    assert.equal(1, #h.sent)
    h = harness({ { status = 503, body = { error = "Service Unavailable" } } })
    _, err = h.ex:read_file("x")
    assert.is_true(errors.is_infra(err))
    assert.equal(1, #h.sent)
  end)

  it("a hard stop during the wait ends it at once with no further send", function()
    local stop = core.signal()
    local h = harness({ busy("/exec"), busy("/exec"), ok_doc() }, { on_sleep = function(n) if n == 2 then stop:abort("stopped") end end })
    local r = assert(h.ex:exec("x", { signal = stop }))
    assert.is_true(r.aborted)
    assert.equal(2, #h.sent)
  end)

  it("ExecHealthTracker leaves the count (and the last infra error) untouched on ExecCapacityError", function()
    local answers = { { fail = { kind = "transport", message = "reset" } } }
    for _ = 1, 5 do answers[#answers + 1] = busy("/exec") end
    local h = harness(answers)
    local tracker = health.new(h.ex, shipped)
    local _, first = tracker:exec("a")
    assert.equal(1, tracker.count)
    local _, cap = tracker:exec("b", { timeout_ms = 30000 })
    assert.is_true(errors.is_capacity(cap))
    assert.equal(1, tracker.count)
    assert.equal(first, tracker.last_error)
  end)
end)

describe("sandbox executor: files", function()
  it("a path refused by the server (403, 404) is a tool error the model reads, not infra", function()
    local h = harness({ { status = 403, body = { error = "../x is outside the workspace", reason = "escape" } },
                        { status = 404, body = { error = "nope: no such file", reason = "not_found" } } })
    local _, e1 = h.ex:read_file("../x")
    local _, e2 = h.ex:read_file("nope")
    assert.is_true(errors.is_tool(e1))
    assert.truthy(e1.message:find("outside the workspace", 1, true))
    assert.is_true(errors.is_tool(e2))
  end)

  it("401 and 5xx on a file route are infra", function()
    local h = harness({ { status = 401, body = { error = "unauthorized" } }, { status = 500, body = { error = "x" } } })
    local _, e1 = h.ex:read_file("f")
    local _, e2 = h.ex:write_file("f", "x")
    assert.is_true(errors.is_infra(e1))
    assert.equal("http 401", e1.code)
    assert.is_true(errors.is_infra(e2))
  end)
end)

---------------------------------------------------------------------------------------------
-- Part 2: real loopback HTTP against the scripted stand-in, numbers scaled down by policy.

describe("sandbox executor over loopback", function()
  local snap = S.snapshot()
  local standin

  local function executor(signal_opts)
    return sandbox.new{ url = standin.url, token = "tok-secret", thread_key = "T1", policy = function() return snap end,
      resolve_envs = function() return { GH_TOKEN = "ghs_live" } end }
  end

  before_each(function() core.run(function() standin = S.start_standin() end) end)
  after_each(function() standin.stop() end)

  it("sends only authorization, content-type and x-thread-key (besides host and content-length)", function()
    core.run(function()
      standin:script({ { body = { stdout = "hi\n", stderr = "", exitCode = 0, durationMs = 1 } } })
      assert.equal("hi", executor():exec("echo hi").text)
      local req = standin:requests()[1]
      local names = {}
      for k in pairs(req.headers) do names[#names + 1] = k end
      table.sort(names)
      assert.same({ "authorization", "content-length", "content-type", "host", "x-thread-key" }, names)
      assert.same({ command = "echo hi", env = { GH_TOKEN = "ghs_live" } }, cjson.decode(req.body))
    end)
  end)

  it("a body that heartbeats but never completes is abandoned at budget + margin with ExecInfraError naming both numbers", function()
    core.run(function()
      standin:script({ { forever = true, beat_ms = 100 } })
      local t0 = core.now_ms()
      local r, err = executor():exec("sleep 1000", { timeout_ms = 1000 })
      local took = core.now_ms() - t0
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.equal("timeout", err.code)
      assert.truthy(err.message:find("gave no answer within 2s (command budget 1s + 1s margin)", 1, true), err.message)
      assert.is_true(took >= 1900 and took < 30000, "took " .. took) -- the body goes on for good: not never
    end)
  end)

  it("a server that never answers is abandoned at the same deadline", function()
    core.run(function()
      standin:script({ { hang = true } })
      local t0 = core.now_ms()
      local _, err = executor():exec("x", { timeout_ms = 1000 })
      assert.equal("timeout", err.code)
      assert.is_true(core.now_ms() - t0 < 30000) -- the server never answers: not never
    end)
  end)

  it("a server killed mid-body is ExecInfraError as soon as the connection drops — never a hang", function()
    core.run(function()
      standin:script({ { die = true, beats = 3, beat_ms = 100 } })
      local t0 = core.now_ms()
      local r, err = executor():exec("sleep 100", { timeout_ms = 60000 })
      local took = core.now_ms() - t0
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.truthy(err.message:find("/exec request failed", 1, true), err.message)
      assert.is_true(took < 30000, "took " .. took) -- under half of the 60 s budget
    end)
  end)

  it("the hard stop drops a streaming request at once", function()
    core.run(function()
      standin:script({ { forever = true, beat_ms = 100 } })
      local stop = core.signal()
      core.go(function() core.sleep(300); stop:abort("operator stop") end)
      local t0 = core.now_ms()
      local r = assert(executor():exec("sleep 100", { timeout_ms = 60000, signal = stop }))
      assert.is_true(r.aborted)
      assert.truthy(r.text:find("operator stop", 1, true))
      assert.is_true(core.now_ms() - t0 < 30000) -- at once: the stream would run 60 s
    end)
  end)

  it("nothing listening is infra at once", function()
    core.run(function()
      local ex = sandbox.new{ url = "http://127.0.0.1:1", token = "t", thread_key = "T", policy = function() return snap end }
      local _, err = ex:exec("true")
      assert.is_true(errors.is_infra(err))
    end)
  end)
end)

describe("sandbox executor: output that is not UTF-8 (issue 16 item 5)", function()
  it("puts back the exact bytes the server sent alongside the replaced text", function()
    local h = harness({ { body = { stdout = "a\u{FFFD}b", stdoutBase64 = core.crypto.base64_encode("a\255b"),
                                    stderr = "", exitCode = 0, durationMs = 3 } } })
    local r = assert(h.ex:exec("printf 'a\\377b'"))
    assert.truthy(r.text:find("a\255b", 1, true), r.text)
    assert.is_nil(r.text:find("\u{FFFD}", 1, true))
  end)
end)

describe("sandbox executor: the agent's network (docs/isolation.md)", function()
  local function make(answers, network)
    local sent = {}
    local tracker = health.new(sandbox.new{
      url = "http://sandboxd.test:1", token = "tok", thread_key = "T", network = network,
      policy = function() return shipped end,
      request = function(req)
        sent[#sent + 1] = req
        local a = table.remove(answers, 1)
        return a.status, {}, cjson.encode(a.body)
      end,
      sleep = function() return true end, now_ms = function() return 0 end,
    }, shipped)
    return tracker, sent
  end

  it("rides in the body of every route, and only when the agent has one", function()
    local ex, sent = make({ ok_doc(), { status = 200, body = { content = "" } }, { status = 200, body = { ok = true } } }, "none")
    assert(ex:exec("true")); assert(ex:read_file("f")); assert(ex:write_file("f", ""))
    for i = 1, 3 do assert.equal("none", cjson.decode(sent[i].body).network) end
    local plain, psent = make({ ok_doc() }, nil)
    assert(plain:exec("true"))
    assert.is_nil(cjson.decode(psent[1].body).network)
  end)

  it("a 409 about the network is a tool error with sandboxd's text, not infrastructure; another 409 is", function()
    local text = 'this thread\'s sandbox instance is awake with network "host"; this request asks for "none".'
    local ex = make({
      { status = 409, body = { error = text, reason = "network-mismatch", stdout = "", stderr = text, exitCode = 127 } },
      { status = 409, body = { error = "no", reason = "network-unavailable" } },
      { status = 409, body = { error = text, reason = "network-mismatch" } },
      { status = 409, body = { error = "something else", reason = "other" } },
    }, "none")
    local r, err = ex:exec("curl x")
    assert.is_nil(r)
    assert.truthy(errors.is_tool(err))
    assert.equal(text, err.message)
    assert.is_nil(select(1, ex:exec("curl x")))
    local _, ferr = ex:read_file("f")
    assert.truthy(errors.is_tool(ferr), tostring(ferr))
    assert.equal(0, ex.count) -- fail-fast counts none of them
    local _, other = ex:exec("curl x")
    assert.truthy(errors.is_infra(other), tostring(other))
    assert.equal(1, ex.count)
  end)
end)
