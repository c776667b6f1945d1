-- The sandbox executor: a thread's commands and files go to its instance on a sandboxd
-- (docs/sandboxd.md; the rules: docs/contract.md#wire-protocol, #failure, #capacity,
-- #credential-transport and #timeout-send-deadline).
--
--   * Every request carries authorization, content-type and x-thread-key — nothing else.
--   * The agent's network ("host" | "none") rides in the body on every route; sandboxd refuses
--     (409, a tool error here) a request whose network the thread's awake instance lacks.
--   * The env map is resolved once per CALL (resolve_envs(), never at construction) and rides
--     in the body on every route — env: {} when empty — never in a header or the command text.
--   * Every send waits budget + call margin for the headers AND the streamed body; a body that
--     heartbeats but never completes is abandoned there with an ExecInfraError naming both
--     numbers. The hard-stop signal aborts at once and is reported as the stop.
--   * Answers are classified through the policy's error rules: fleet-busy (reason only) waits
--     and re-sends the identical request, then ExecCapacityError; a booting container is
--     re-sent once; a present-but-empty error, any other in-body error, a non-200 answer and a
--     failed transport are ExecInfraError after one send; a body without an error key is the
--     command's result, whatever its exit code.
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local classify = require("switchboard.shell.classify")
local errors = require("switchboard.exec.errors")
local preflight = require("switchboard.exec.preflight")
local tracing = require("switchboard.exec.tracing")
local render = require("switchboard.shell.render")
local protocol = require("switchboard.shell.protocol")
local wire_text = require("switchboard.shell.wire_text")
local template = require("switchboard.policy.template")
local process_notes = require("switchboard.exec.process_notes")

local M = {}
M.__index = M

M.WHO = "sandboxd"

-- How much of a server's error text, or of a body that is not the protocol's, an error message
-- quotes: enough to recognize it, never a whole page (like policy.rule's MAX_MATCH_BYTES).
M.QUOTE_ERROR_BYTES = 300
M.QUOTE_BODY_BYTES = 120

local json = core.json

local function no_envs() return {} end

-- opts: url (the sandboxd base URL), token, thread_key, policy (fn → the current snapshot;
--       read only when a call's opts carry no snap),
--       build (this binary's commit, core.build.commit: the factory passes it; with it, the
--       first call first reads sandboxd's /healthz once, and logs
--       sandbox.version-skew at warn when the builds differ — log only, docs/contract.md#rollout-skew),
--       resolve_envs (fn → NAME = value | nil, err; called on every exec, read and write),
--       network ("host" | "none": the agent's, policies/agents.lua; sent on every route and
--       fixed by sandboxd when the request makes the thread's instance; nil sends none),
--       request (core.http.request by default), sleep (core.sleep), now_ms (core.now_ms) —
--       the last three let specs drive the waits without real time.
function M.new(opts)
  assert(type(opts.url) == "string" and opts.url ~= "", "sandbox executor: opts.url is required")
  assert(type(opts.token) == "string" and opts.token ~= "", "sandbox executor: opts.token is required")
  assert(type(opts.policy) == "function", "sandbox executor: opts.policy is required")
  return setmetatable({
    backend = "sandbox",
    url = (opts.url:gsub("/+$", "")),
    token = opts.token,
    thread_key = opts.thread_key or "default",
    policy = opts.policy,
    resolve_envs = opts.resolve_envs or no_envs,
    network = opts.network,
    build = opts.build,
    request = opts.request or core.http.request,
    sleep = opts.sleep or core.sleep,
    now_ms = opts.now_ms or core.now_ms,
  }, M)
end

local function headers_of(self)
  return {
    authorization = "Bearer " .. self.token,
    ["content-type"] = "application/json",
    [protocol.THREAD_HEADER] = self.thread_key,
  }
end

local function message(snap, name, vars)
  return template.fill(snap.errors.messages[name], vars)
end

local function first_line(s)
  return (tostring(s):match("^[^\n]*"))
end

local stop_reason = preflight.stop_reason

-- What the server said in a non-200 answer, for the message: its error text, else a short
-- excerpt of the body (never the whole of it).
local function detail_of(doc, raw)
  if type(doc) == "table" and type(doc.error) == "string" and doc.error:find("%S") then
    return first_line(doc.error):sub(1, M.QUOTE_ERROR_BYTES)
  end
  raw = tostring(raw or ""):gsub("%s+", " "):gsub("^ ", "")
  if raw == "" then return "no body" end
  return raw:sub(1, M.QUOTE_BODY_BYTES)
end

local function decode(raw)
  local doc, err = json.decode(raw or "")
  if type(doc) == "table" then return doc end
  return nil, doc ~= nil and ("a JSON " .. (doc == json.null and "null" or type(doc)) .. " instead of an object")
    or first_line(err.message)
end

-- The per-route verdict on one answer (a verdict names what to do next; it is not an error,
-- so its field is `verdict`, never `kind`):
--   {verdict = "ok", doc} | {verdict = "fleet_busy"} | {verdict = "container_starting", message}
--   | {verdict = "infra", message, code} | {verdict = "tool", message}
-- Refusals about the instance's network (docs/isolation.md): nothing ran, the text says why and
-- what to do; the model and the card read it, and it is no infrastructure failure.
local NETWORK_REFUSALS = { [protocol.NETWORK_MISMATCH] = true, [protocol.NETWORK_UNAVAILABLE] = true }

local function judge_exec(snap, route, status, doc, raw, elapsed_ms)
  if status ~= 200 then
    if status == 503 and classify.is_fleet_busy_answer(doc) then return { verdict = "fleet_busy" } end
    if status == 409 and type(doc) == "table" and NETWORK_REFUSALS[doc.reason]
        and type(doc.error) == "string" and doc.error:find("%S") then
      return { verdict = "tool", message = doc.error }
    end
    return {
      verdict = "infra", code = classify.span_code(snap, "http", status),
      message = message(snap, "http_status", { who = M.WHO, route = route, status = status, detail = detail_of(doc, raw) }),
    }
  end
  if doc == nil then
    return { verdict = "infra", code = classify.span_code(snap, "inbody"),
      message = message(snap, "bad_answer", { who = M.WHO, route = route, detail = detail_of(nil, raw) }) }
  end
  local verdict = classify.exec_answer(snap, doc, elapsed_ms)
  if verdict.verdict ~= "result" then return verdict end
  local code = doc.exitCode
  if math.type(code) ~= "integer" and not (type(code) == "number" and code == math.floor(code)) then
    return { verdict = "infra", code = classify.span_code(snap, "inbody"),
      message = message(snap, "bad_answer", { who = M.WHO, route = route, detail = "exitCode is not a whole number" }) }
  end
  return { verdict = "ok", doc = doc }
end

-- File routes: 200 is the answer; 503 with reason fleet-busy waits; a 4xx with a text is a
-- tool error the model should read (a path outside the workspace, a missing file); anything
-- else (401, 5xx, not JSON) is infra.
local function judge_file(snap, route, status, doc, raw)
  if (status == 200 or status == 201) and doc ~= nil then return { verdict = "ok", doc = doc } end
  if status == 503 and classify.is_fleet_busy_answer(doc) then return { verdict = "fleet_busy" } end
  if status == 200 then
    return { verdict = "infra", code = classify.span_code(snap, "inbody"),
      message = message(snap, "bad_answer", { who = M.WHO, route = route, detail = detail_of(nil, raw) }) }
  end
  -- A present but blank error reads as /exec's does: the never-empty empty_error text.
  if type(doc) == "table" and classify.is_empty_error(snap, doc.error) then
    return { verdict = "infra", code = classify.span_code(snap, "inbody"),
      message = message(snap, "empty_error", {}) }
  end
  if status >= 400 and status < 500 and status ~= 401 and status ~= 408 and status ~= 429
      and type(doc) == "table" and type(doc.error) == "string" and doc.error:find("%S") then
    return { verdict = "tool", message = classify.thrown_text(snap, doc.error) }
  end
  return {
    verdict = "infra", code = classify.span_code(snap, "http", status),
    message = message(snap, "http_status", { who = M.WHO, route = route, status = status, detail = detail_of(doc, raw) }),
  }
end

-- One HTTP request as an http.request span, a child of the operation's exec.* span when the
-- tracing decorator handed one down (opts.span): route, attempt and status — never a body.
local function http_call(self, req, call)
  local parent = call.span
  if type(parent) ~= "table" or parent.trace_id == nil then return self.request(req) end
  call.attempt = (call.attempt or 0) + 1
  return tracing.request_in_span(parent, { route = call.route, method = req.method, attempt = call.attempt },
    self.request, req)
end

-- Send one request (the same bytes every time) and follow the policy's re-send rules.
-- call: route, body (encoded once), budget_ms (the clamped budget: the deadline is made of it
--       and the fleet-busy wait bounded by it), deadline_ms, signal
-- Returns a verdict (verdict ok | tool | infra | stopped) or nil, capacity error.
local function send(self, snap, call)
  local req = {
    method = call.method or "POST", url = self.url .. call.route, headers = headers_of(self), body = call.body,
    deadline_ms = call.deadline_ms, signal = call.signal,
    max_body = snap.timeouts.sandbox.max_answer_bytes,
  }
  local judge = call.route == "/exec" and judge_exec or judge_file
  local waits, waited, next_wait = nil, 0, 1
  local starting_left = snap.timeouts.container_starting.retries
  while true do
    if call.signal and call.signal.aborted then return { verdict = "stopped" } end
    local t0 = self.now_ms()
    local status, headers, raw = http_call(self, req, call)
    if status == nil then
      local err = headers or {}
      if err.kind == "aborted" or (call.signal and call.signal.aborted) then return { verdict = "stopped" } end
      if err.kind == "timeout" then
        return { verdict = "infra", code = classify.span_code(snap, "timeout"),
          message = budget.no_answer_message(snap, M.WHO, call.route, call.budget_ms) }
      end
      -- refused or unresolvable: not a byte was sent, so the command certainly did not run
      return { verdict = "infra", code = classify.span_code(snap, "inbody"),
        message = message(snap, err.not_sent and "not_connected" or "transport_failed", {
          who = M.WHO, route = call.route, detail = first_line(err.message or err.kind or "transport failure"),
        }) }
    end
    local doc = decode(raw)
    local verdict = judge(snap, call.route, status, doc, raw, self.now_ms() - t0)
    if verdict.verdict == "fleet_busy" then
      waits = waits or budget.fleet_busy_waits(snap, call.budget_ms)
      local d = waits[next_wait]
      if d == nil then
        return nil, errors.capacity(classify.capacity_message(snap, waited), waited)
      end
      if not self.sleep(d, call.signal) then return { verdict = "stopped" } end
      waited = waited + d
      next_wait = next_wait + 1
    elseif verdict.verdict == "container_starting" and starting_left > 0 then
      starting_left = starting_left - 1
      if not self.sleep(snap.timeouts.container_starting.retry_after_ms, call.signal) then
        return { verdict = "stopped" }
      end
    elseif verdict.verdict == "container_starting" then
      return { verdict = "infra", code = classify.span_code(snap, "inbody"), message = verdict.message }
    else
      return verdict
    end
  end
end

-- The build sandboxd answers /healthz with, or "unknown" for any failure or other shape.
local function sandboxd_build(self, snap, signal)
  local status, _, raw = self.request{
    method = "GET", url = self.url .. "/healthz", headers = { authorization = "Bearer " .. self.token },
    deadline_ms = snap.timeouts.call.margin_ms, max_body = snap.timeouts.sandbox.max_answer_bytes,
    signal = signal,
  }
  local doc = status == 200 and decode(raw) or nil
  local commit = type(doc) == "table" and type(doc.build) == "table" and doc.build.commit
  return type(commit) == "string" and commit ~= "" and commit or "unknown"
end

-- Once per executor (one per thread, so once per sandbox instance), before its first call: a
-- rollout can hand a new bot an instance still running the previous sandboxd. One GET bounded
-- by the call margin; whatever it answers, the call then goes ahead unchanged (log only).
local function check_build_once(self, snap, signal)
  if self.build == nil or self.build_checked then return end
  self.build_checked = true
  local ok, theirs = pcall(sandboxd_build, self, snap, signal)
  theirs = ok and theirs or "unknown"
  if theirs ~= self.build then
    core.log("warn", "sandbox.version-skew", { container = theirs, bot = self.build, url = self.url })
  end
end

-- An empty env is still the object {} (cjson writes an empty table as an object).
local function encode(body)
  return json.encode(body)
end

-- A thread key the wire cannot carry is refused before anything is sent.
local function key_refusal(self, snap)
  local ok, why = protocol.check_thread_key(self.thread_key, snap.timeouts.sandbox.max_thread_key_bytes)
  if ok then return nil end
  return errors.tool("this thread's key cannot be sent to sandboxd: " .. why)
end

-- The note sandboxd gave about the thread's workspace on a wake ({state = "kept" | "expired",
-- text}), once, or nil.
function M:take_workspace_note()
  local note = self.workspace_note
  self.workspace_note = nil
  return note
end

function M:exec(command, opts)
  opts = opts or {}
  local call, refused = preflight.command(self, command, opts, function(snap)
    local bad_key = key_refusal(self, snap)
    if not bad_key then check_build_once(self, snap, opts.signal) end
    return bad_key
  end)
  if not call then return nil, refused end
  local snap = call.snap
  -- timeoutMs only when the caller asked (sandboxd applies its own default otherwise)
  local body = { command = command, env = call.envs, timeoutMs = call.timeout_ms, network = self.network,
    base = opts.base, baseSince = opts.base_since } -- the repository a clone prepares: sandboxd's prepared base (docs/sandboxd.md)
  local verdict, capacity = send(self, snap, {
    route = "/exec", body = encode(body), budget_ms = call.budget_ms,
    deadline_ms = budget.send_deadline(snap, call.budget_ms),
    signal = opts.signal, span = opts.span,
  })
  if verdict == nil then return nil, capacity end
  if verdict.verdict == "stopped" then
    return render.result(snap, {
      aborted = true, abort_reason = stop_reason(opts.signal), stdout = "", stderr = "",
      clip_line = call.clip_line,
    })
  end
  if verdict.verdict == "tool" then return nil, errors.tool(verdict.message) end
  if verdict.verdict ~= "ok" then return nil, errors.infra(verdict.message, verdict.code) end
  local doc = wire_text.decode(verdict.doc) -- output that was not UTF-8: its exact bytes
  -- what became of the thread's workspace since it last ran (kept from its sleep, expired:
  -- docs/sandboxd.md "Slept workspaces"): kept for the card (take_workspace_note), never the
  -- model's text
  if type(doc.workspace) == "table" and type(doc.workspace.text) == "string" then
    self.workspace_note = { state = tostring(doc.workspace.state), text = doc.workspace.text }
  end
  return render.result(snap, {
    exit_code = math.tointeger(doc.exitCode),
    stdout = type(doc.stdout) == "string" and doc.stdout or "",
    stderr = type(doc.stderr) == "string" and doc.stderr or "",
    duration_ms = type(doc.durationMs) == "number" and doc.durationMs or nil,
    clip_line = call.clip_line,
  })
end

local function file_call(self, route, fields, opts, method)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  local bad_key = key_refusal(self, snap)
  if bad_key then return nil, bad_key end
  check_build_once(self, snap, opts.signal)
  local envs, env_err = preflight.envs(self)
  if not envs then return nil, env_err end
  local file_budget = snap.timeouts.file_op.budget_ms
  local body
  if fields then
    fields.env = envs
    fields.network = self.network
    body = encode(fields)
  end
  local verdict, capacity = send(self, snap, {
    method = method, route = route, body = body, budget_ms = file_budget,
    deadline_ms = budget.file_op_deadline(snap), signal = opts.signal,
    span = opts.span,
  })
  if verdict == nil then return nil, capacity end
  if verdict.verdict == "stopped" then
    return nil, errors.tool(("%s stopped: %s"):format(route:sub(2), stop_reason(opts.signal)))
  end
  if verdict.verdict == "tool" then return nil, errors.tool(verdict.message) end
  if verdict.verdict ~= "ok" then return nil, errors.infra(verdict.message, verdict.code) end
  return verdict.doc, snap
end

function M:read_file(path, opts)
  local doc, snap_or_err = file_call(self, "/read", { path = path }, opts)
  if doc == nil then return nil, snap_or_err end
  local bytes = type(doc.content) == "string" and core.crypto.base64_decode(doc.content) or nil
  if bytes == nil then
    return nil, errors.infra(message(snap_or_err, "bad_answer", {
      who = M.WHO, route = "/read", detail = "content is not base64" }))
  end
  return bytes
end

-- Background processes and exposed ports (docs/sandboxd.md): the thread's dev server, started
-- and not awaited, and a URL that reaches a port of it from outside. Each returns the route's
-- document, or nil and a tool error (a limit, an unknown id) or an infra error.
--   ex:start_process(command, opts) → {id, pid, command, status = "running", startedAt}
--   ex:processes(opts)              → {{id, command, status, exitCode?, …}, …}
--   ex:process_logs(id, opts)       → {stdout, stderr} (the tails)
--   ex:kill_process(id, opts)       → the record, status "killed"
--   ex:expose_port(port, opts)      → url
--   ex:unexpose_port(port, opts)    → true
-- The route's document alone (file_call's second value is its snapshot), or nil, err.
local function doc_only(doc, err)
  if doc == nil then return nil, err end
  return doc
end

local function id_path(id)
  return type(id) == "string" and id:find("^p%x+$") and ("/processes/" .. id) or nil
end

local function bad_id(id)
  return errors.tool(("no background process %s in this thread"):format(tostring(id)))
end

function M:start_process(command, opts)
  if type(command) ~= "string" or command:find("^%s*$") then
    return nil, errors.tool("start_process needs a command: a non-empty string")
  end
  local doc, err = doc_only(file_call(self, "/processes", { command = command }, opts))
  if doc and type(doc.id) == "string" then process_notes.started(self, { id = doc.id, command = command }) end
  return doc, err
end

-- The card's lines about the processes started here (exec/process_notes.lua), at an ask's end.
function M:take_notes()
  return process_notes.take(self, function() return self:processes() end)
end

function M:processes(opts)
  local doc, err = file_call(self, "/processes", nil, opts, "GET")
  if doc == nil then return nil, err end
  return type(doc.processes) == "table" and doc.processes or {}
end

function M:process_logs(id, opts)
  local path = id_path(id)
  if not path then return nil, bad_id(id) end
  return doc_only(file_call(self, path .. "/logs", nil, opts, "GET"))
end

function M:kill_process(id, opts)
  local path = id_path(id)
  if not path then return nil, bad_id(id) end
  return doc_only(file_call(self, path, nil, opts, "DELETE"))
end

function M:expose_port(port, opts)
  local doc, err = file_call(self, "/ports", { port = port }, opts)
  if doc == nil then return nil, err end
  return doc.url
end

function M:unexpose_port(port, opts)
  if math.type(port) ~= "integer" then return nil, errors.tool("unexpose_port needs a port number") end
  local doc, err = file_call(self, "/ports/" .. port, nil, opts, "DELETE")
  if doc == nil then return nil, err end
  return true
end

function M:write_file(path, bytes, opts)
  local doc, err = file_call(self, "/write", {
    path = path, content = core.crypto.base64_encode(bytes), encoding = "base64",
  }, opts)
  if doc == nil then return nil, err end
  return true
end


---------------------------------------------------------------------------------------------
-- The backend's declaration (exec/backends.lua): a `switchboard sandboxd` over HTTP.
local schema = require("switchboard.policy.schema")

local function set(getenv, name)
  local v = name and getenv(name)
  return v ~= nil and v ~= ""
end

-- --backend sandbox needs a sandboxd to talk to: every command says so the same way, at
-- start, with the configuration status. The words, or nil.
local function start_problem(snap, opts, getenv)
  local cfg = snap.execution.sandbox
  local url = opts.sandbox_url or getenv(cfg.url_env)
  if url == nil or url == "" then
    return ("--backend sandbox needs --sandbox-url URL (or $%s): the address of a running "
      .. "`switchboard sandboxd`"):format(cfg.url_env)
  end
  if not set(getenv, cfg.token_env) then
    return ("--backend sandbox needs $%s, the bearer token the sandboxd was started with")
      :format(cfg.token_env)
  end
end

local function build(opts, ctx, snap, _, kit)
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.sandbox
  local url = opts.sandbox_url or getenv(cfg.url_env)
  if not url or url == "" then return kit.missing(cfg.url_env) end
  local token = getenv(cfg.token_env)
  if not token or token == "" then return kit.missing(cfg.token_env) end
  return M.new{
    url = require("switchboard.exec.rendezvous").pick(url, ctx.thread_key),
    token = token, thread_key = ctx.thread_key, policy = opts.policy,
    build = core.build.commit, resolve_envs = kit.resolve_envs, network = kit.network,
  }
end

-- A count from JSON as a person writes it: 25, not 25.0 (cjson decodes every number a float).
local function count_text(n)
  return type(n) == "number" and math.tointeger(n) and tostring(math.tointeger(n)) or tostring(n or "?")
end

-- `switchboard doctor`'s check (env: getenv, sandbox_url, call — doctor's GET → status, doc):
-- the sandboxd answers /healthz with this binary's build.
local function doctor(env, snap)
  local cfg = snap.execution.sandbox
  local getenv = env.getenv
  local url = env.sandbox_url ~= "" and env.sandbox_url or nil
  if not url and set(getenv, cfg.url_env) then url = getenv(cfg.url_env) end
  if not url then return "skip", ("no sandboxd configured (set %s or --sandbox-url)"):format(cfg.url_env) end
  if not set(getenv, cfg.token_env) then return "FAIL", ("%s is set but %s is not — fix: give the bot the token sandboxd was started with"):format(cfg.url_env, cfg.token_env) end
  local token = getenv(cfg.token_env)
  core.log_redact(token)
  local status, doc = env.call{ method = "GET", url = url:gsub("/+$", "") .. "/healthz",
    headers = { authorization = "Bearer " .. token }, deadline_ms = snap.github.request_timeout_ms }
  if status == nil then return "FAIL", ("%s/healthz: %s — fix: start `switchboard sandboxd` there, or correct %s"):format(url, tostring(doc), cfg.url_env) end
  if status == 401 then return "FAIL", ("%s refused the token (401) — fix: %s must equal the sandboxd's"):format(url, cfg.token_env) end
  if status ~= 200 or type(doc) ~= "table" then return "FAIL", ("%s/healthz answered %s"):format(url, tostring(status)) end
  local theirs = type(doc.build) == "table" and tostring(doc.build.commit) or "?"
  local ours = core.build.commit
  if theirs ~= ours then
    return "FAIL", ("%s runs build %s, this binary is %s — fix: deploy the same build to both"):format(url, theirs, ours)
  end
  return "ok", ("%s answers /healthz with this build (%s); %s of %s instances awake"):format(url, ours,
    count_text(doc.instances and doc.instances.awake), count_text(doc.instances and doc.instances.max))
end

M.backend = {
  name = "sandbox",
  help = "a `switchboard sandboxd` (--sandbox-url, $SANDBOX_TOKEN)",
  settings = schema.S.record { url_env = schema.env_name, token_env = schema.env_name },
  configured = function(snap, getenv, opts)
    local e = snap.execution.sandbox
    return (opts.sandbox_url ~= nil or set(getenv, e.url_env)) and set(getenv, e.token_env)
  end,
  start_problem = start_problem,
  doctor = { name = "sandboxd", check = doctor },
  build = build,
}

return M
