-- Small debts (issue 15, point 10), each held by a test that fails without it:
--   /read and /write failures read like /exec's (the never-empty empty_error text);
--   the sandbox executor's HTTP call is a child span of its exec.* span;
--   an agent without a repository needs no sandbox credential, whatever the backend.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local P = require("support.policies")
local sandbox = require("switchboard.exec.sandbox")
local tracing = require("switchboard.exec.tracing")
local stack = require("switchboard.exec.stack")
local errors = require("switchboard.exec.errors")

local shipped = P.shipped()

-- A loopback sandboxd stand-in: answers[route] = {status, doc}.
local function serve(answers)
  local srv = core.http.serve{ host = "127.0.0.1", port = 0, handler = function(req, res)
    local a = answers[req.path] or { 404, { error = "no route" } }
    res:send(a[1], { ["content-type"] = "application/json" }, cjson.encode(a[2]))
  end }
  return srv, "http://127.0.0.1:" .. srv.port
end

local function executor(url)
  return sandbox.new{ url = url, token = "tok-secret-123", thread_key = "T1",
    policy = function() return shipped end, resolve_envs = function() return {} end }
end

describe("small debts", function()
  it("/read and /write with a blank error say the never-empty empty_error text, like /exec", async(function()
    local srv, url = serve({
      ["/exec"] = { 200, { stdout = "", stderr = "", exitCode = 1, error = "   " } },
      ["/read"] = { 404, { error = "" } },
      ["/write"] = { 500, { error = " " } },
    })
    local ex = executor(url)
    local _, eerr = ex:exec("true")
    local _, rerr = ex:read_file("a.txt")
    local _, werr = ex:write_file("b.txt", "x")
    srv:close()
    local want = shipped.errors.messages.empty_error
    assert.equal(want, eerr.message)
    assert.equal(want, rerr.message)
    assert.equal(want, werr.message)
    assert.truthy(errors.is_infra(rerr))
  end))

  it("the sandbox executor's HTTP call is a child span of its exec span", async(function()
    local srv, url = serve({ ["/exec"] = { 200, { stdout = "hi\n", stderr = "", exitCode = 0, durationMs = 1 } } })
    local sink = tracing.memory_sink()
    local ex = tracing.new(executor(url), { sink = sink, backend = "sandbox" })
    assert(ex:exec("echo hi", { timeout_ms = 5000 }))
    srv:close()
    local by_name = {}
    for _, r in ipairs(sink.records) do by_name[r.name] = r end
    local parent, child = assert(by_name["exec.exec"]), assert(by_name["http.request"], cjson.encode(sink.records))
    assert.equal(parent.trace_id, child.trace_id)
    assert.equal(parent.span_id, child.parent_id)
    assert.equal("/exec", child.attributes.route)
    assert.equal(200, child.attributes.status)
    assert.falsy(cjson.encode(child):find("echo hi", 1, true)) -- never the command
  end))

  it("the general agent (no repository) needs no sandbox credential, even with --backend sandbox", function()
    local built, err = stack.build({
      policy = function() return shipped end, force_backend = "sandbox", sandbox_url = nil,
      getenv = function() return nil end,
    }, { thread_key = "t", agent = "general", snap = shipped })
    assert.is_nil(err)
    assert.truthy(built and built.executor)
    -- while a repository agent in the same place is refused, naming the variable
    local none, rerr = stack.build({
      policy = function() return shipped end, force_backend = "sandbox", getenv = function() return nil end,
    }, { thread_key = "t", agent = "coding", snap = shipped })
    assert.is_nil(none)
    assert.truthy(tostring(rerr):find("SANDBOX_", 1, true), tostring(rerr))
  end)
end)
