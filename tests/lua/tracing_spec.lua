-- The tracing decorator (docs/contract.md#tracing).
local tracing = require("switchboard.exec.tracing")
local errors = require("switchboard.exec.errors")
local cjson = require("cjson")

local SECRET_COMMAND = "echo s3cr3t-command | grep token"
local SECRET_PATH = "/workspace/private/path.txt"
local SECRET_OUTPUT = "output-bytes-that-must-not-leak"

local function fake(backend)
  local ex = { backend = backend or "sandbox", seen = {} }
  function ex:exec(command, opts)
    self.seen[#self.seen + 1] = { op = "exec", command = command, opts = opts }
    if command == "infra" then return nil, errors.infra("gone", "timeout") end
    if command == "raise" then error({ marker = "the same table" }) end
    if command == "raise-string" then error("plain failure", 0) end
    return { exit_code = 3, stdout = SECRET_OUTPUT, stderr = "", text = "exit 3: " .. SECRET_OUTPUT }
  end
  function ex:read_file(path, opts)
    self.seen[#self.seen + 1] = { op = "read_file", path = path, opts = opts }
    return SECRET_OUTPUT
  end
  function ex:write_file(path, bytes, opts)
    self.seen[#self.seen + 1] = { op = "write_file", path = path, bytes = bytes, opts = opts }
    return true
  end
  return ex
end

local clock = { wall_ms = function() return 1700000000000 end, now_ms = function() return 5 end }

describe("TracingExecutor", function()
  local sink, inner, ex
  before_each(function()
    sink = tracing.memory_sink()
    inner = fake()
    ex = tracing.new(inner, { sink = sink, clock = clock })
  end)

  it("exec, read_file and write_file are exec.* spans carrying the backend and the per-call timeout", function()
    local r = ex:exec(SECRET_COMMAND, { timeout_ms = 600000 })
    assert.equal(3, r.exit_code)
    assert.equal(SECRET_OUTPUT, ex:read_file(SECRET_PATH, { timeout_ms = 300000 }))
    assert.is_true(ex:write_file(SECRET_PATH, SECRET_OUTPUT, {}))
    local names = {}
    for i, rec in ipairs(sink.records) do
      names[i] = rec.name
      assert.equal("sandbox", rec.attributes.backend)
      assert.equal("ok", rec.status)
      assert.equal("span", rec.type)
    end
    assert.same({ "exec.exec", "exec.read_file", "exec.write_file" }, names)
    assert.equal(600000, sink.records[1].attributes.timeout_ms)
    assert.equal(3, sink.records[1].attributes.exit_code)
    assert.equal(300000, sink.records[2].attributes.timeout_ms)
    assert.is_nil(sink.records[3].attributes.timeout_ms)
  end)

  it("never carries the command, a path, file bytes or output", function()
    ex:exec(SECRET_COMMAND, { timeout_ms = 1000 })
    ex:read_file(SECRET_PATH, {})
    ex:write_file(SECRET_PATH, SECRET_OUTPUT, {})
    ex:exec("infra", {})
    for _, rec in ipairs(sink.records) do
      local line = cjson.encode(rec)
      for _, secret in ipairs({ "s3cr3t", SECRET_PATH, SECRET_OUTPUT, "gone" }) do
        assert.is_nil(line:find(secret, 1, true), secret .. " leaked into " .. line)
      end
    end
  end)

  it("hands the span to the inner executor as opts.span, a child of the caller's span", function()
    local parent = tracing.start_span("tool.bash", nil, {}, { clock = clock })
    local opts = { timeout_ms = 1000, span = parent, signal = "sig" }
    ex:exec("ls", opts)
    local seen = inner.seen[1].opts
    assert.equal("sig", seen.signal)
    assert.equal(1000, seen.timeout_ms)
    assert.equal(sink.records[1].span_id, seen.span.span_id)
    assert.equal(parent.span_id, sink.records[1].parent_id)
    assert.equal(parent.trace_id, sink.records[1].trace_id)
    -- the caller's opts are not modified
    assert.equal(parent, opts.span)
    -- without a parent: a new trace
    ex:read_file("p")
    assert.is_nil(sink.records[2].parent_id)
    assert.matches("^%x+$", sink.records[2].trace_id)
    assert.equal(32, #sink.records[2].trace_id)
    assert.equal(16, #sink.records[2].span_id)
    assert.not_equal(sink.records[1].span_id, sink.records[2].span_id)
  end)

  it("a nil, err return ends the span as an error and comes back unchanged", function()
    local r, err = ex:exec("infra", {})
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err))
    assert.equal("gone", err.message)
    local rec = sink.records[1]
    assert.equal("error", rec.status)
    assert.same({ kind = "infra", code = "timeout" }, rec.error)
  end)

  it("a throw ends the span as an error and propagates unchanged", function()
    local ok, err = pcall(ex.exec, ex, "raise", {})
    assert.is_false(ok)
    assert.equal("the same table", err.marker)
    assert.equal("error", sink.records[1].status)
    ok, err = pcall(ex.exec, ex, "raise-string", {})
    assert.is_false(ok)
    assert.equal("plain failure", err)
    assert.same({ kind = "raise" }, sink.records[2].error)
  end)

  it("release and move_to are wrapped only when the inner executor has them", function()
    assert.is_nil(ex.release)
    assert.is_nil(ex.move_to)
    local with = fake("e2b")
    function with:release(mode) self.released = mode; return true end
    local traced = tracing.new(with, { sink = sink, clock = clock })
    assert.is_nil(traced.move_to)
    assert.is_true(traced:release("always"))
    assert.equal("always", with.released)
    local rec = sink.records[#sink.records]
    assert.equal("exec.release", rec.name)
    assert.equal("e2b", rec.attributes.backend)
    local moved = fake("resident")
    function moved:move_to(where) self.moved = where; return nil, errors.infra("attach failed", "infra/attach") end
    traced = tracing.new(moved, { sink = sink, clock = clock })
    assert.is_nil(traced.release)
    local r, err = traced:move_to("thread-2")
    assert.is_nil(r)
    assert.equal("infra/attach", err.code)
    assert.equal("exec.move_to", sink.records[#sink.records].name)
    assert.equal("error", sink.records[#sink.records].status)
  end)

  it("the file sink writes one JSON document per line", function()
    local path = require("support.tmp").name("trace")
    local fs = assert(tracing.file_sink(path))
    local t = tracing.new(fake("local"), { sink = fs, clock = clock })
    t:exec("ls", { timeout_ms = 5 })
    t:exec("infra", {})
    fs.close()
    local lines = {}
    for line in io.lines(path) do lines[#lines + 1] = cjson.decode(line) end
    os.remove(path)
    assert.equal(2, #lines)
    assert.equal("exec.exec", lines[1].name)
    assert.equal("local", lines[1].attributes.backend)
    assert.equal(5, lines[1].attributes.timeout_ms)
    assert.equal(1700000000000, lines[1].start_ms)
    assert.equal("error", lines[2].status)
  end)

  it("the backend may be named by the factory's selection", function()
    local t = tracing.new(fake("sandbox"), { sink = sink, clock = clock, backend = "resident" })
    t:exec("ls", {})
    assert.equal("resident", sink.records[1].attributes.backend)
  end)

  it("a sink may be a plain function", function()
    local got = {}
    local t = tracing.new(fake(), { sink = function(rec) got[#got + 1] = rec end, clock = clock })
    t:write_file("p", "b")
    assert.equal("exec.write_file", got[1].name)
  end)
end)

-- Issue 38: the backends' own HTTP calls (e2b, Kubernetes, the resident) are http.request
-- children of the operation's span, and an agent's tool call is the parent of the exec.* spans
-- it causes (before, neither existed: the clients' requests emitted nothing and a tool call
-- handed the executor no span).
describe("spans across the stack", function()
  local sink
  before_each(function() sink = tracing.memory_sink() end)

  local function by_name(name)
    local out = {}
    for _, rec in ipairs(sink.records) do if rec.name == name then out[#out + 1] = rec end end
    return out
  end

  it("a request through tracing.http during an operation is an http.request child of its span", function()
    local wrapped = tracing.http(function(req)
      assert.equal("GET", req.method)
      return 200, {}, "{}"
    end, "kubernetes")
    local inner = fake("kubernetes")
    function inner:exec() wrapped{ method = "GET", url = "https://10.0.0.1:6443/api/v1/namespaces/sb/pods/p1?watch=1&resourceVersion=7" }
      return { exit_code = 0, text = "" } end
    local ex = tracing.new(inner, { sink = sink, clock = clock })
    ex:exec("true", {})
    local http, exec = by_name("http.request"), by_name("exec.exec")
    assert.equal(1, #http)
    assert.equal(exec[1].span_id, http[1].parent_id)
    assert.equal(exec[1].trace_id, http[1].trace_id)
    assert.same({ backend = "kubernetes", method = "GET", route = "/api/v1/namespaces/sb/pods/p1", status = 200 },
      http[1].attributes)
    -- outside an operation the same function makes no span
    wrapped{ method = "GET", url = "https://10.0.0.1:6443/version" }
    assert.equal(1, #by_name("http.request"))
  end)

  it("the e2b, Kubernetes and resident clients' requests are wrapped", function()
    local calls = 0
    local function request() calls = calls + 1; return 200, {}, "{}" end
    local span = tracing.start_span("exec.exec", nil, {}, { sink = sink, clock = clock })
    tracing.within(span, function()
      require("switchboard.exec.resident_client").new{ url = "http://127.0.0.1:1", token = "t", request = request }
        :call("GET", "/status?repo=acme/api")
      require("switchboard.exec.kubernetes_api").new({}, { request = request })
        .request{ method = "GET", url = "https://k/api/v1/pods" }
      require("switchboard.exec.e2b").new{ api_key = "k", policy = function() end, request = request }
        .request{ method = "POST", url = "https://api.e2b.app/sandboxes" }
    end)
    assert.equal(3, calls)
    local routes = {}
    for _, rec in ipairs(by_name("http.request")) do
      assert.equal(span.span_id, rec.parent_id)
      routes[#routes + 1] = rec.attributes.backend .. " " .. rec.attributes.route
    end
    assert.same({ "resident /status", "kubernetes /api/v1/pods", "e2b /sandboxes" }, routes)
  end)

  it("an agent's tool call is an agent.tool span, the parent of the exec.* spans it causes", function()
    local snap = assert(require("support.sandbox").snapshot())
    local tools = require("switchboard.agent.tools")
    local ex = tracing.new(fake(), { sink = sink, clock = clock })
    local out = tools.call(ex, snap, { tools = { "bash" } }, { id = "t1", name = "bash", input = { command = "true" } }, {})
    assert.equal("result", out.kind)
    local tool, exec = by_name("agent.tool"), by_name("exec.exec")
    assert.equal(1, #tool)
    assert.equal(1, #exec)
    assert.equal(tool[1].span_id, exec[1].parent_id)
    assert.equal(tool[1].trace_id, exec[1].trace_id)
    assert.equal("bash", tool[1].attributes.tool)
  end)
end)
