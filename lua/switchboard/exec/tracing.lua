-- TracingExecutor (docs/contract.md#tracing): every executor operation is an exec.* span.
--   exec → exec.exec, read_file → exec.read_file, write_file → exec.write_file,
--   release → exec.release and move_to → exec.move_to only when the inner executor has them.
-- A span carries the backend and the per-call timeout_ms (and an exec's exit code) — never
-- the command, a path, file bytes or output. A `nil, err` return or a raise ends the span as
-- an error (its kind and code only) and reaches the caller unchanged. The span is handed to
-- the inner executor as opts.span, so its HTTP calls can be children of it; it is also the
-- running coroutine's current span while the operation runs (M.current), so a client whose
-- request function is wrapped with M.http (e2b, Kubernetes, the resident) makes each of its
-- requests an http.request child without threading the span through its calls. An operation
-- whose opts carry no span takes the current one as its parent: an agent's tool call
-- (M.within, agent/tools.lua) is the parent of the exec.* spans it causes.
--
--   local sink = tracing.file_sink("/var/log/switchboard/spans.jsonl")  -- or stderr_sink()
--   local ex = tracing.new(inner, {sink = sink})
--   ex:exec("npm test", {timeout_ms = 600000, span = tool_span})
--
-- A sink is a function(record) or a table with :write(record); records go out as one JSON
-- document per line: {type="span", name, trace_id, span_id, parent_id?, start_ms,
-- duration_ms, status="ok"|"error", attributes={backend, timeout_ms?, exit_code?},
-- error={kind, code?}?}

local json = require("switchboard.core").json
local metrics = require("switchboard.metrics")

local M = {}

---------------------------------------------------------------------------------------------
-- Engine hooks (random ids, clocks) with stand-ins when the engine is not loaded.

local core = require("switchboard.policy.loader").core -- the engine, or nil outside it

local function hex(bytes)
  return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local seeded = false
function M.random_id(nbytes)
  local c = core()
  if c and c.crypto and c.crypto.random_bytes then return hex(c.crypto.random_bytes(nbytes)) end
  if not seeded then math.randomseed(os.time(), math.floor(os.clock() * 1e6)); seeded = true end
  local out = {}
  for i = 1, nbytes do out[i] = string.char(math.random(0, 255)) end
  return hex(table.concat(out))
end

local default_clock = {
  wall_ms = function()
    local c = core()
    if c and c.wall_ms then return c.wall_ms() end
    return os.time() * 1000
  end,
  now_ms = function()
    local c = core()
    if c and c.now_ms then return c.now_ms() end
    return os.clock() * 1000
  end,
}

---------------------------------------------------------------------------------------------
-- Sinks

-- A span line goes through the log's redaction too: a registered secret in a command's text or
-- an error is written as [redacted] (docs/isolation.md "Fronts that serve other people").
local function encode(record)
  local text = json.encode(record)
  local c = core()
  if c and c.log_scrub then text = c.log_scrub(text) end
  return text
end
M.encode = encode

-- Append JSON lines to a file (created when missing).
function M.file_sink(path)
  local f, err = io.open(path, "a")
  if not f then return nil, err end
  f:setvbuf("line")
  return {
    write = function(_, record) f:write(encode(record), "\n") end,
    close = function() f:close() end,
  }
end

-- The sink a command line's --trace names: nil for none, "-" for stderr, else a file.
function M.sink_for(path)
  if path == nil then return nil end
  if path == "-" then return M.stderr_sink() end
  return M.file_sink(path)
end

function M.stderr_sink()
  return { write = function(_, record) io.stderr:write(encode(record), "\n") end }
end

-- Keeps records in .records (specs, the console).
function M.memory_sink()
  local sink = { records = {} }
  function sink:write(record) self.records[#self.records + 1] = record end
  return sink
end

local function emit(sink, record)
  if type(sink) == "function" then return sink(record) end
  if sink then return sink:write(record) end
end

---------------------------------------------------------------------------------------------
-- Spans

local Span = {}
Span.__index = Span

-- parent: a span of this module or any table with trace_id / span_id.
function M.start_span(name, parent, attributes, opts)
  opts = opts or {}
  local clock = opts.clock or default_clock
  local ids = opts.ids or M.random_id
  local self = setmetatable({
    name = name,
    trace_id = type(parent) == "table" and parent.trace_id or ids(16),
    span_id = ids(8),
    parent_id = type(parent) == "table" and parent.span_id or nil,
    attributes = attributes or {},
    start_ms = clock.wall_ms(),
    t0 = clock.now_ms(),
    clock = clock,
    sink = opts.sink,
  }, Span)
  return self
end

local function error_fields(err)
  if type(err) == "table" then
    local kind = type(err.kind) == "string" and err.kind or "error"
    local code = type(err.code) == "string" and err.code or nil
    return { kind = kind, code = code }
  end
  return { kind = "raise" }
end

-- status "ok" | "error"; err: what ended it (only its kind and code are kept).
function Span:finish(status, err)
  if self.status then return end
  self.status = status
  local record = {
    type = "span", name = self.name, trace_id = self.trace_id, span_id = self.span_id,
    parent_id = self.parent_id, start_ms = self.start_ms,
    duration_ms = self.clock.now_ms() - self.t0, status = status,
    attributes = self.attributes,
  }
  if status == "error" then record.error = error_fields(err) end
  emit(self.sink, record)
end

---------------------------------------------------------------------------------------------
-- The current span of a coroutine: set while a traced operation (or M.within) runs in it.

local current = setmetatable({}, { __mode = "k" })

function M.current() return current[coroutine.running()] end

-- Run fn(...) with span as this coroutine's current span; the one before is restored after,
-- a raise included.
function M.within(span, fn, ...)
  local co = coroutine.running()
  local before = current[co]
  current[co] = span
  local restore <close> = setmetatable({}, { __close = function() current[co] = before end })
  return fn(...)
end

-- A tool call of an agent as an agent.tool span (attributes: the tool's name), written where
-- the executor's spans go (ex.sink: the tracing decorator's), its parent the current span.
-- Returns the span, or nil when the executor writes no spans.
function M.tool_span(ex, name)
  if type(ex) ~= "table" or ex.sink == nil then return nil end
  return M.start_span("agent.tool", M.current(), { tool = name }, { sink = ex.sink, clock = ex.clock, ids = ex.ids })
end

-- request(req) as an http.request child span of parent with these attributes; the span ends
-- with the status (an error from 500), the failure, or a raise going through.
function M.request_in_span(parent, attributes, request, req)
  local span = M.start_span("http.request", parent, attributes, { sink = parent.sink, clock = parent.clock })
  local done <close> = setmetatable({}, { __close = function(_, err)
    if err ~= nil then span:finish("error", err) end
  end })
  local status, headers, raw = request(req)
  if status == nil then
    span:finish("error", headers)
  else
    span.attributes.status = status
    span:finish(status < 500 and "ok" or "error", { kind = "http", code = tostring(status) })
  end
  return status, headers, raw
end

-- request(req) wrapped so that, under a current span, each request is an http.request child
-- of it: backend, method, the URL's path (no query: it may carry a watch's resourceVersion or
-- a name the caller chose) and the status — never a header or a body.
function M.http(request, backend)
  return function(req)
    local parent = M.current()
    if type(parent) ~= "table" or parent.trace_id == nil or type(req) ~= "table" then return request(req) end
    local path = tostring(req.url or ""):match("^%a[%w+.-]*://[^/]*(/[^?#]*)") or "/"
    return M.request_in_span(parent, { backend = backend, method = req.method or "GET", route = path }, request, req)
  end
end

---------------------------------------------------------------------------------------------
-- The wrapper

local function with_span(opts, span)
  local out = {}
  if type(opts) == "table" then
    for k, v in pairs(opts) do out[k] = v end
  end
  out.span = span
  return out
end

-- The bot's side of switchboard_commands_total / _duration_seconds: every exec through an
-- executor stack (an infra or capacity failure included; a refusal ran nothing).
local function count_command(result, err)
  local outcome
  if type(result) == "table" then
    outcome = result.aborted and "stopped" or result.timed_out and "124" or "exit"
    if type(result.duration_ms) == "number" then
      metrics.observe("switchboard_command_duration_seconds", result.duration_ms / 1000)
    end
  elseif type(err) == "table" and (err.kind == "infra" or err.kind == "capacity") then
    outcome = err.kind
  end
  if outcome then metrics.inc("switchboard_commands_total", { outcome = outcome }) end
end

-- Run inner[method] with args, the opts argument (at opts_at) replaced by a copy carrying
-- the span; end the span by the outcome and hand the outcome back unchanged.
local function traced(self, op, method, opts_at, ...)
  local args = table.pack(...)
  local opts = opts_at and args[opts_at] or nil
  local attrs = { backend = self.backend }
  if type(opts) == "table" and type(opts.timeout_ms) == "number" then attrs.timeout_ms = opts.timeout_ms end
  local parent = type(opts) == "table" and opts.span or M.current()
  local span = M.start_span("exec." .. op, parent, attrs, { sink = self.sink, clock = self.clock, ids = self.ids })
  if opts_at then
    args[opts_at] = with_span(opts, span)
    if args.n < opts_at then args.n = opts_at end
  end
  -- A raise ends the span on its way through, uncaught (a to-be-closed value sees it).
  local closer <close> = setmetatable({}, { __close = function(_, err)
    if err ~= nil then span:finish("error", err) end
  end })
  local res = table.pack(M.within(span, self.inner[method], self.inner, table.unpack(args, 1, args.n)))
  if op == "exec" then count_command(res[1], res[2]) end
  if res[1] == nil and res.n >= 2 then
    span:finish("error", res[2])
  else
    if op == "exec" and type(res[1]) == "table" and type(res[1].exit_code) == "number" then
      attrs.exit_code = res[1].exit_code
    end
    span:finish("ok")
  end
  return table.unpack(res, 1, res.n)
end

M.PROCESS_OPS = { start_process = 2, processes = 1, process_logs = 2, kill_process = 2, expose_port = 2,
                  unexpose_port = 2 }

-- opts: sink (where spans go; none → dropped), backend (default inner.backend),
--       clock {wall_ms, now_ms}, ids(nbytes) → hex.
function M.new(inner, opts)
  opts = opts or {}
  local self = {
    inner = inner, backend = opts.backend or inner.backend, sink = opts.sink,
    clock = opts.clock, ids = opts.ids,
  }
  function self.exec(s, command, o) return traced(s, "exec", "exec", 2, command, o) end
  function self.read_file(s, path, o) return traced(s, "read_file", "read_file", 2, path, o) end
  function self.write_file(s, path, bytes, o) return traced(s, "write_file", "write_file", 3, path, bytes, o) end
  if type(inner.release) == "function" then
    function self.release(s, ...) return traced(s, "release", "release", nil, ...) end
  end
  if type(inner.move_to) == "function" then
    function self.move_to(s, ...) return traced(s, "move_to", "move_to", nil, ...) end
  end
  -- background processes and ports (exec/sandbox.lua), where the backend has them: each an
  -- exec.<method> span; the index of each one's opts argument
  for method, opts_at in pairs(M.PROCESS_OPS) do
    if type(inner[method]) == "function" then
      self[method] = function(s, ...) return traced(s, method, method, opts_at, ...) end
    end
  end
  -- a property, not an operation: no span
  if type(inner.workspace_dir) == "function" then
    function self.workspace_dir(s) return s.inner:workspace_dir() end
  end
  if type(inner.take_workspace_note) == "function" then
    function self.take_workspace_note(s) return s.inner:take_workspace_note() end
  end
  return self
end

return M
