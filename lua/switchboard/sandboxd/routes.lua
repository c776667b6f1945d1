-- sandboxd's routes (docs/sandboxd.md, docs/contract.md#wire-protocol): the handler core.http.serve runs, one task per request.
--
-- Order of checks on every request: the bearer (401, same answer whatever was wrong), the route
-- and method (404, 405), then — except /healthz — the thread key (400) and the JSON body (400).
-- Each request captures the policy snapshot current when it arrived and keeps it to the end.
-- Nothing here logs a header, an env value, a path or the command text.
local core = require("switchboard.core")
local auth = require("switchboard.sandboxd.auth")
local metrics = require("switchboard.metrics")
local envmod = require("switchboard.sandboxd.env")
local protocol = require("switchboard.shell.protocol")
local budget = require("switchboard.shell.budget")
local child_env = require("switchboard.shell.child_env")
local classify = require("switchboard.shell.classify")
local render = require("switchboard.shell.render")
local template = require("switchboard.policy.template")
local wire_text = require("switchboard.shell.wire_text")
local process_routes = require("switchboard.sandboxd.process_routes")

local M = {}

local json = core.json
M.json = json

local JSON = { ["content-type"] = "application/json", ["cache-control"] = "no-store" }
local ROUTE_LIST = "POST /exec, POST /read, POST /write, GET /healthz, GET /metrics, "
  .. "POST|GET /processes, GET /processes/<id>/logs, DELETE /processes/<id>, POST|GET /ports, DELETE /ports/<port>"

-- Answers are streamed out as the client reads them: a slice is written, then the handler waits
-- (res:drain) until the socket took most of what is queued. A 12 MB answer never sits whole in
-- the write queue, and a client reading steadily through a small buffer gets all of it.
local SLICE = 64 * 1024

-- Writes text as body slices; false when the peer went away.
local function stream(res, text)
  for at = 1, #text, SLICE do
    if not res:write(text, at, at + SLICE - 1) then return false end -- a slice, not a copy
    if not res:drain() then return false end
  end
  return true
end
M.stream = stream

local function send_json(res, status, doc, extra)
  local headers = JSON
  local text = json.encode(doc)
  if extra or #text > SLICE then
    headers = {}
    for k, v in pairs(JSON) do headers[k] = v end
    for k, v in pairs(extra or {}) do headers[k] = v end
  end
  if #text <= SLICE then return res:send(status, headers, text) end
  headers["content-length"] = #text
  if res:start(status, headers) and stream(res, text) then res:finish() end
end

-- /exec answers every failure in the dual shape (docs/contract.md#failure-shape), whatever the status.
local function refuse(res, route, status, text, reason)
  if route == "/exec" then
    return send_json(res, status, protocol.exec_failure(text, reason))
  end
  return send_json(res, status, { error = text, reason = reason })
end

local function first_line(s)
  return (tostring(s):match("^[^\n]*"))
end

-- The body as a JSON object, or nil, err (kind invalid: the message is the 400's text).
local function decode_object(body, route)
  if body == nil or body == "" then
    return nil, core.error("invalid", ("the %s body is empty; send a JSON object"):format(route))
  end
  local doc, err = json.decode(body)
  if doc == nil then
    return nil, core.error("invalid", ("the %s body is not valid JSON (%s)"):format(route, first_line(err.message)))
  end
  if type(doc) ~= "table" then
    return nil, core.error("invalid", ("the %s body must be a JSON object, got a JSON %s"):format(route,
      doc == json.null and "null" or type(doc)))
  end
  -- lua-cjson 2.1 decodes [] and {} alike; a non-empty array is told apart by its items.
  if rawget(doc, 1) ~= nil then
    return nil, core.error("invalid", ("the %s body must be a JSON object, got a JSON array"):format(route))
  end
  return doc
end

local function append_line(text, line)
  if text == "" then return line end
  if text:sub(-1) ~= "\n" then text = text .. "\n" end
  return text .. line
end

local function server_failure(snap, detail)
  local text = template.fill(snap.errors.messages.server_failure, {
    detail = classify.thrown_text(snap, detail),
  })
  return protocol.exec_failure(text)
end

-- A proc result as the protocol's document: a deadline kill is exit 124 with the line naming
-- the limit and the timeoutMs knob; truncated streams are marked.
local function result_document(snap, r, limit_ms, max_output)
  local stderr, code = r.stderr, r.exit
  if r.timed_out then
    code = 124
    stderr = append_line(stderr, render.timeout_line(snap, limit_ms, "sandbox"))
  end
  for _, stream in ipairs({ "stdout", "stderr" }) do
    if r.truncated and r.truncated[stream] then
      stderr = append_line(stderr, template.fill(snap.errors.messages.truncated, {
        stream = stream, limit = max_output,
      }))
    end
  end
  return protocol.exec_result(r.stdout, stderr, code, r.duration_ms)
end

-- One space every heartbeat while the command runs (until done fires); a peer that went away
-- stops the command (nobody is left to read its answer). A ticker, not a task: a coroutine per
-- running command was ~1 KiB of each of 2,000 waiting requests (issue 43's RSS row).
local function heartbeat(res, interval_ms, done, stop)
  local last, gone = core.now_ms(), false
  core.every(interval_ms, function()
    if gone or done.aborted then return end
    if res.closed then
      gone = true
      stop:abort("client gone")
      return
    end
    local now = core.now_ms()
    if now - last > 1.5 * interval_ms then metrics.inc("switchboard_heartbeat_gaps_total") end
    last = now
    res:write(" ")
  end, done)
end

-- The outcome a command counts under in switchboard_commands_total.
local function outcome_of(r, doc)
  if doc.error ~= nil then return r and r.aborted and "stopped" or "infra" end
  if r and r.aborted then return "stopped" end
  if r and r.timed_out then return "124" end
  return "exit"
end

-- The environment every command starts from (policies/execution.lua child_env), built once per
-- policy snapshot: the server's own environment does not change while it runs. The exec lane
-- (lane.lua program) starts its commands from this same table.
local base_cache = setmetatable({}, { __mode = "k" })
local function base_env(ctx, snap)
  local env = base_cache[snap]
  if env == nil then
    env = child_env.base(snap, ctx.getenv, ctx.mode == "walls")
    base_cache[snap] = env
  end
  return env
end

-- The kernel's limits on what execve(2) takes (Linux): one argument or one environment entry
-- at most MAX_ARG_STRLEN bytes with its NUL; argv and envp together (strings and pointers) at
-- most ARG_MAX, 2 MiB with the default 8 MiB stack.
M.MAX_ARG_STRLEN = 32 * 4096
M.ARG_MAX = 2 * 1024 * 1024
local EXEC_OVERHEAD = 64 -- "bash", "-c" and the argv pointers around the command

-- A command the kernel would refuse to start is the caller's mistake, not the sandbox's: the
-- answer is a result the model reads (exit 126 and a stderr saying what to do), never the infra
-- shape — two of those in a row would trip the executor's fail-fast. Pure; returns the text, or
-- nil when the command can start.
function M.client_mistake(command, env)
  if #command + 1 > M.MAX_ARG_STRLEN then
    return ("the command is %d bytes; the kernel starts at most %d bytes of command (bash -c). "
      .. "Write it to a file (write_file) and run that file instead, e.g. bash ./script.sh")
      :format(#command, M.MAX_ARG_STRLEN - 1)
  end
  local total = #command + 1 + EXEC_OVERHEAD
  for name, value in pairs(env) do
    local entry = #name + 1 + #value + 1
    if entry > M.MAX_ARG_STRLEN then
      return ("the env variable %s is %d bytes; the kernel takes at most %d bytes per variable. "
        .. "Put large values in a file (write_file) and read it from the command")
        :format(name, entry - 1, M.MAX_ARG_STRLEN - 1)
    end
    total = total + entry + 8
  end
  if total > M.ARG_MAX then
    return ("the command and its env are %d bytes together; the kernel takes at most %d (ARG_MAX). "
      .. "Send fewer or smaller env values, or put them in a file (write_file)")
      :format(total, M.ARG_MAX)
  end
  return nil
end

local MISTAKE_EXIT = 126 -- "cannot execute", as a shell says it

local function mistake_document(text)
  return protocol.exec_result("", text, MISTAKE_EXIT, 0)
end

-- A command's metrics and its debug line, once its answer is written (or its writing failed):
-- neither changes the answer, so neither sits between the command's end and the answer.
-- (Once per request, and the exec lane's too: the outcome's labels are made once, and the debug
-- line's fields only when core.log writes debug lines.)
local OUTCOME_LABELS = setmetatable({}, { __index = function(t, outcome)
  local labels = { outcome = outcome }
  t[outcome] = labels
  return labels
end })

local function account_command(ctx, label, r, exit, duration_ms, failed, outcome)
  metrics.inc("switchboard_commands_total", OUTCOME_LABELS[outcome or "exit"])
  if duration_ms then metrics.observe("switchboard_command_duration_seconds", duration_ms / 1000) end
  if ctx.log ~= core.log or core.log_enabled("debug") then
    ctx.log("debug", "sandboxd.exec", {
      instance = label, exit = exit, duration_ms = duration_ms,
      timed_out = r and r.timed_out or nil, failed = failed,
    })
  end
end

local function account_exec(ctx, inst, r, doc)
  account_command(ctx, inst.label, r, doc.exitCode, doc.durationMs, doc.error ~= nil or nil, outcome_of(r, doc))
end

local function run_exec(ctx, snap, inst, call, res, state)
  local command, env, limit_ms = call.command, call.env, call.limit_ms
  -- the head waits for the first heartbeat or the answer: a command that ends before the
  -- first heartbeat is answered in one write (head, document, last chunk)
  res:start(200, JSON, { hold = true })
  state.started = true
  local stop = core.signal(ctx.stopping)
  local done = state.done
  heartbeat(res, snap.timeouts.sandbox.heartbeat_ms, done, stop)
  -- the snapshot's base as it is when the request sends no env (most do not): never changed
  -- below (runner:exec copies it before it adds a variable)
  local full_env = base_env(ctx, snap)
  if next(env) ~= nil then
    local merged = {}
    for name, value in pairs(full_env) do merged[name] = value end
    for name, value in pairs(env) do merged[name] = value end
    full_env = merged
  end
  local max_output = snap.timeouts.process.max_output_bytes
  local mistake = M.client_mistake(command, full_env)
  local r, err
  if not mistake then
    r, err = inst.runner:exec{
      command = command, env = full_env, deadline_ms = limit_ms,
      -- repository bases (sandboxd/bases.lua); not in pod mode, where a pod serves one thread
      base = not ctx.pod and call.base or nil, base_since = call.base_since,
      kill_grace_ms = snap.timeouts.bash.kill_grace_ms, max_output = max_output, signal = stop,
    }
    -- the kernel's own verdict, should its limit be lower than the one assumed above
    if r == nil and tostring(err and err.message):find("Argument list too long", 1, true) then
      mistake = "the command and its env are larger than the kernel starts (E2BIG). Write the "
        .. "command to a file (write_file) and run that file, and send fewer env values"
    end
  end
  done:abort("done")
  local doc = M.exec_document(ctx, snap, inst, limit_ms, r, err, mistake, stop.reason)
  M.answer_exec(ctx, inst, res, r, doc)
  -- after the answer: its next ordinary commands may take the exec lane (sandboxd/lane.lua)
  if doc.error == nil and not mistake and ctx.lane and r and not r.aborted and not r.timed_out then
    ctx.lane:settled(snap, inst)
  end
end

-- The document of a command that ran (r), could not start (err) or was the caller's mistake;
-- stop_reason: why an aborted command was killed. Shared with the exec lane's hand-back
-- (sandboxd/lane.lua): an outcome the lane does not answer itself is composed here.
function M.exec_document(ctx, snap, inst, limit_ms, r, err, mistake, stop_reason)
  local max_output = snap.timeouts.process.max_output_bytes
  local doc
  if mistake then
    doc = mistake_document(mistake)
  elseif r == nil then
    doc = server_failure(snap, err)
  elseif r.aborted and ctx.stopping.aborted then
    doc = protocol.exec_failure(template.fill(snap.errors.messages.server_stopped, {
      drain_s = classify.seconds(ctx.drain_ms or 0),
    }))
  elseif r.aborted then
    doc = server_failure(snap, "the command was killed: " .. tostring(stop_reason))
  else
    doc = result_document(snap, r, limit_ms, max_output)
    -- the thread's first command after a wake is told what became of its workspace (kept from
    -- its sleep, or expired): {state, text}, which the executor carries to the card
    local note = inst.runner.take_note and inst.runner:take_note()
    if note then doc.workspace = note end
  end
  return doc
end

-- The answer written (its head already started), then counted and logged. streamed: nil, or
-- (the exec lane sent r.stdout as it came, closing quote included) whether it was valid UTF-8:
-- then only the rest of the document is written, and doc.stdout is what was sent, whatever the
-- document (a failure's too: docs/contract.md).
function M.answer_exec(ctx, inst, res, r, doc, streamed)
  -- the answer first: what it counts and logs can wait until it is on the socket
  local account <close> = setmetatable({}, { __close = function() account_exec(ctx, inst, r, doc) end })
  local parts
  if streamed ~= nil then
    doc.stdout = r.stdout
    parts = wire_text.answer_tail_parts(doc, json, streamed)
  else
    parts = wire_text.answer_parts(doc, json)
  end
  local size = 0
  for _, part in ipairs(parts) do size = size + #part end
  if size <= SLICE then return res:finish(table.concat(parts)) end
  -- a megabyte of output goes as it was encoded, never joined again; the short pieces around
  -- it are joined among themselves
  local short = {}
  for i, part in ipairs(parts) do
    if #part <= SLICE then short[#short + 1] = part end
    if #part > SLICE or i == #parts then
      if #short > 0 and not stream(res, table.concat(short)) then return end
      short = {}
    end
    if #part > SLICE and not stream(res, part) then return end
  end
  res:finish()
end

local function fleet_cause(ctx)
  local text = ("sandboxd has %d of %d instances awake"):format(ctx.fleet.awake, ctx.fleet:max())
  local d = ctx.descriptors
  if d and ctx.fleet:max() >= d.capacity then -- the open-files limit binds, not the policy
    text = text .. ("; its open-files limit (%d) holds no more: raise LimitNOFILE / ulimit -Hn for sandboxd")
      :format(d.limit)
  end
  return text
end

local function closed_text()
  return "sandboxd is shutting down and takes no new work; send the request again once it is back"
end

-- Network per agent (docs/isolation.md "The local executor, and network per agent"): what the
-- request asks of the thread's instance — {network}, the body's value or this server's
-- policies/isolation.lua network — fixed when the request creates the instance. nil for a
-- server that does not give instances networks of their own (ctx.networks unset: the resident,
-- whose threads' walls are built at /attach). nil, status, why, reason when this server cannot
-- give it.
local function wanted(ctx, snap, call)
  if not ctx.networks then return nil end
  local network = call.network or snap.isolation.network
  if not ctx.networks[network] then
    local why = ctx.mode == "pod"
      and "runs in pod mode (the pod's NetworkPolicy is its network)"
      or "runs without walls (--no-walls)"
    return nil, 409, ("this sandboxd %s and cannot take an instance off "
      .. "the network; the request asks for network %q (policies/agents.lua network, else "
      .. "policies/isolation.lua network). Run sandboxd with its walls, or use an agent with "
      .. "network \"host\""):format(why, network), protocol.NETWORK_UNAVAILABLE
  end
  return { network = network }
end

local function mismatch_text(snap, inst, want)
  return ("this thread's sandbox instance is awake with network %q; this request asks for %q. "
    .. "An instance's network is fixed when it is made (policies/agents.lua network): ask in "
    .. "another thread, or again once this one's instance has slept (after %ds idle, timeouts "
    .. "sandbox.sleep_after)"):format(tostring(inst.network), want.network,
      classify.seconds(snap.timeouts.sandbox.sleep_after_ms))
end

-- The thread's instance for a request, or nil after answering. Every refusal here ran nothing.
local function instance_for(ctx, snap, key, call, route, res)
  -- pod mode: one thread per pod, the first that asked; another key is a routing mistake upstream
  if ctx.pod then
    ctx.pod.key = ctx.pod.key or key
    if ctx.pod.key ~= key then
      refuse(res, route, 409, "this sandboxd runs in pod mode and serves one thread only, another "
        .. "than this request's; each thread claims a pod of its own", "pod-bound")
      return nil
    end
  end
  local want, status, why, reason = wanted(ctx, snap, call)
  if status then
    refuse(res, route, status, why, reason)
    return nil
  end
  local inst, busy, awake = ctx.fleet:acquire(key, want)
  if inst then return inst end
  if busy.code == protocol.NETWORK_MISMATCH then
    refuse(res, route, 409, mismatch_text(snap, awake, want), protocol.NETWORK_MISMATCH)
  elseif busy.code == "fleet-busy" then
    metrics.inc("switchboard_fleet_busy_total")
    if route == "/exec" then
      metrics.inc("switchboard_commands_total", { outcome = "capacity" })
      send_json(res, 200, classify.fleet_busy_exec_answer(snap, fleet_cause(ctx)))
    else
      local fstatus, doc = classify.fleet_busy_http_answer(snap, fleet_cause(ctx))
      send_json(res, fstatus, doc)
    end
  else
    refuse(res, route, 503, closed_text())
  end
  return nil
end

local function exec_route(ctx, snap, key, call, res)
  local inst = instance_for(ctx, snap, key, call, "/exec", res)
  if not inst then return end
  local state = { started = false, done = core.signal() }
  local ok, err = xpcall(run_exec, debug.traceback, ctx, snap, inst, call, res, state)
  state.done:abort("done") -- the heartbeat ends on every path, a raise included
  ctx.fleet:release(inst)
  if not ok then -- (the answer may be under way: the engine's 500 cannot be sent any more)
    ctx.log("error", "sandboxd.exec_failed", { instance = inst.label, error = err }) -- with its traceback
    local doc = server_failure(snap, "internal error in sandboxd: " .. first_line(err))
    if state.started then res:finish(json.encode(doc)) else send_json(res, 500, doc) end
  end
end

local FS_STATUS = { escape = 403, not_found = 404, not_a_file = 400, too_large = 413 }

-- The text goes through the same never-empty rule as /exec's failures (classify.thrown_text).
local function fs_failure(snap, res, route, err)
  local status = FS_STATUS[err and err.kind] or 500
  return send_json(res, status, {
    error = classify.thrown_text(snap, err and { message = err.message, name = err.kind } or nil),
    reason = err and err.kind,
  })
end

-- A to-be-closed value that gives the instance back to the fleet.
local function released_after(ctx, inst)
  return setmetatable({}, { __close = function() ctx.fleet:release(inst) end })
end

local function read_route(ctx, snap, key, call, res)
  local path, route = call.path, "/read"
  local inst = instance_for(ctx, snap, key, call, route, res)
  if not inst then return end
  -- the instance goes back however this ends; a raise passes to the engine's one protected
  -- call, which logs it with its traceback and answers 500
  local held <close> = released_after(ctx, inst)
  local bytes, err = inst.runner:read(path, snap.timeouts.sandbox.max_file_bytes)
  if bytes == nil then return fs_failure(snap, res, "/read", err) end
  send_json(res, 200, { content = core.crypto.base64_encode(bytes), encoding = "base64", size = #bytes })
end

local function write_route(ctx, snap, key, call, res)
  local path, bytes, route = call.path, call.bytes, "/write"
  local inst = instance_for(ctx, snap, key, call, route, res)
  if not inst then return end
  local held <close> = released_after(ctx, inst)
  local done, err = inst.runner:write(path, bytes)
  if not done then return fs_failure(snap, res, "/write", err) end
  send_json(res, 200, { ok = true, size = #bytes })
end

local function healthz(ctx, res)
  send_json(res, 200, {
    ok = true,
    mode = ctx.mode, -- "pod": the pod is the wall (docs/sandboxd.md "Pod mode")
    build = { commit = ctx.build.commit, builtAt = ctx.build.built_at },
    instances = { awake = ctx.fleet.awake, max = ctx.fleet:max() },
  })
end

---------------------------------------------------------------------------------------------
-- Request bodies: parse(snap, route, raw) is pure (nothing waits, nothing runs) and never
-- raises, whatever the bytes — tests/fuzz/fuzz_exec_body.c holds it to that. It returns
--   /exec  → {command, env, limit_ms, network?, base?}   (env through envFromRequest, limit clamped
--            by policy; network "host" | "none", nil when the body has none; base owner/name)
--   /read  → {path, network?}
--   /write → {path, bytes, network?}
-- or nil, status, why (why is never empty).

local function path_of(body, route)
  local path = body.path
  if type(path) ~= "string" or path == "" then
    return nil, 400, ("the %s body needs path: a non-empty string"):format(route)
  end
  if path:find("\0", 1, true) then return nil, 400, "the path contains a NUL byte" end
  return path
end

-- The network the request asks its instance to have (nil: the server's default), or false, why.
local function network_of(body)
  local network, why = protocol.check_network(body.network)
  if network == false then return false, "the request's " .. why end
  return network
end

local PARSE = {}

function PARSE.exec(snap, body)
  local command = body.command
  if type(command) ~= "string" or command:find("^%s*$") then
    return nil, 400, "the /exec body needs command: a non-empty string"
  end
  if command:find("\0", 1, true) then
    return nil, 400, "the command contains a NUL byte, which a shell command cannot carry"
  end
  local network, why = network_of(body)
  if network == false then return nil, 400, why end
  -- base: the repository this command prepares, as the bot names it ("owner/name"; only ever
  -- hashed, never a path: sandboxd/bases.lua)
  local base = body.base
  if base ~= nil and (type(base) ~= "string" or base == "" or #base > 256 or base:find("[%z\n]")) then
    return nil, 400, "the /exec body's base must be a repository's name (1 to 256 bytes, one line)"
  end
  -- baseSince: a push the bot heard of (seconds since the epoch): a base made before it is stale
  local since = body.baseSince
  if since ~= nil and (type(since) ~= "number" or since ~= since or since < 0 or since > 2 ^ 40) then
    return nil, 400, "the /exec body's baseSince must be a time in seconds since the epoch"
  end
  since = since and math.floor(since)
  return { command = command, env = envmod.from_request(body), limit_ms = budget.server_budget(snap, body.timeoutMs),
           network = network, base = base, base_since = since }
end

function PARSE.read(snap, body)
  local path, status, why = path_of(body, "/read")
  if not path then return nil, status, why end
  local network, nwhy = network_of(body)
  if network == false then return nil, 400, nwhy end
  return { path = path, network = network }
end

function PARSE.write(snap, body)
  local path, status, why = path_of(body, "/write")
  if not path then return nil, status, why end
  local content, encoding = body.content, body.encoding
  if type(content) ~= "string" then
    return nil, 400, "the /write body needs content: a string (base64 with encoding \"base64\")"
  end
  local bytes = content
  if encoding == "base64" then
    local decoded, derr = core.crypto.base64_decode(content)
    if decoded == nil then
      return nil, 400, "content is not valid base64: " .. tostring(type(derr) == "table" and derr.message or derr)
    end
    bytes = decoded
  elseif encoding ~= nil and encoding ~= "utf8" and encoding ~= "utf-8" then
    return nil, 400, "encoding must be \"base64\" or \"utf8\" (the default)"
  end
  local max = snap.timeouts.sandbox.max_file_bytes
  if #bytes > max then
    return nil, 413, ("the file is %d bytes; at most %d are accepted"):format(#bytes, max), "too_large"
  end
  local network, nwhy = network_of(body)
  if network == false then return nil, 400, nwhy end
  return { path = path, bytes = bytes, network = network }
end

function M.parse(snap, route, raw)
  local parse = PARSE[route:sub(2)]
  if route:sub(1, 1) ~= "/" or parse == nil then return nil, 404, "no route " .. tostring(route) end
  local body, why = decode_object(raw, route)
  if body == nil then return nil, 400, why.message end
  return parse(snap, body)
end

M.JSON = JSON
M.base_env = base_env
M.account_exec = function(...) return account_exec(...) end
-- the exec lane's answered command (sandboxd/lane.lua heard): account_exec without a document
local NO_ERROR = {}
M.account_command = function(ctx, label, r, exit, duration_ms)
  return account_command(ctx, label, r, exit, duration_ms, nil, outcome_of(r, NO_ERROR))
end
M.heartbeat_gap = function() metrics.inc("switchboard_heartbeat_gaps_total") end
-- the exec lane's answered commands reported together (sandboxd/lane.lua report): what
-- account_command counts for each, durations in ms in the order they ended (no debug line: C
-- wrote each)
M.account_answered = function(durations)
  metrics.inc("switchboard_commands_total", OUTCOME_LABELS.exit, #durations)
  for i = 1, #durations do metrics.observe("switchboard_command_duration_seconds", durations[i] / 1000) end
end

-- GET /metrics (behind the bearer here; `sandboxd --metrics-listen` serves it without one).
function M.metrics(res)
  return metrics.answer(res)
end

function M.register_gauges(fleet)
  if fleet == nil then return end
  metrics.gauge("switchboard_instances", { state = "awake" }, function() return fleet.awake end)
  metrics.gauge("switchboard_instances", { state = "sleeping" }, function() return fleet.sleeping or 0 end)
  require("switchboard.sandboxd.load_gauges").register()
end

local ROUTES = { ["/exec"] = exec_route, ["/read"] = read_route, ["/write"] = write_route }

-- What process_routes.lua uses of this file.
local helpers = { instance_for = instance_for, send_json = send_json, decode_object = decode_object,
  base_env = base_env, json = json }

-- The checks that need no body, run by the HTTP server when a request's head is complete and
-- before a byte of its body is read (core.http.serve's on_head): a request that fails them is
-- answered at once and its body is never read or buffered — 401 for a missing or wrong bearer
-- (an unauthenticated client cannot make the server hold megabytes), 404/405 for a route or
-- method that does not exist, 400 for a missing or malformed thread key. Returns nil to go on,
-- or status, headers, body.
-- table (optional, for another server on the same pattern — the resident): routes (path →
-- method), list (their text for a 404), keyless (paths that need no thread key).
function M.on_head(ctx, table_)
  local check = auth.checker(ctx.token)
  local routes = table_ and table_.routes or protocol.ROUTES
  local list = table_ and table_.list or ROUTE_LIST
  local keyless = table_ and table_.keyless or { ["/healthz"] = true }
  local background = ctx.processes ~= nil and table_ == nil -- sandboxd's own, not the resident's
  return function(req)
    if background then -- a preview URL: its token is its credential, checked here at the head
      local known = process_routes.preview_known(ctx, req)
      if known then return nil end
      if known == false then -- never "proven", and its body is never read
        return 404, { ["content-type"] = "text/plain; charset=utf-8" }, "no such preview URL\n"
      end
    end
    if not check(req.headers[protocol.AUTH_HEADER], req) then
      return auth.REFUSAL_STATUS, JSON, auth.REFUSAL_BODY
    end
    if req.path == "/metrics" and req.method == "GET" then return nil end -- no thread key
    local method = routes[req.path]
    if method == nil and background then
      local name, allow = process_routes.match(req.method, req.path)
      if name == false then
        local headers = { allow = allow }
        for k, v in pairs(JSON) do headers[k] = v end
        return 405, headers, json.encode({ error = ("%s takes %s"):format(req.path, allow) })
      end
      if name then method = req.method end
    end
    if method == nil then
      return 404, JSON, json.encode({ error = ("no route %s; the routes are %s"):format(req.path, list) })
    end
    if req.method ~= method then
      local headers = { allow = method }
      for k, v in pairs(JSON) do headers[k] = v end
      return 405, headers, json.encode({ error = ("%s takes %s"):format(req.path, method) })
    end
    if keyless[req.path] then return nil end
    local snap = ctx.policy()
    local ok, why = protocol.check_thread_key(req.headers[protocol.THREAD_HEADER], snap.timeouts.sandbox.max_thread_key_bytes)
    if not ok then
      local doc = req.path == "/exec" and protocol.exec_failure(why) or { error = why }
      return 400, JSON, json.encode(doc)
    end
    return nil
  end
end

-- ctx: fleet, token, policy (fn → snapshot), build ({commit, built_at}), log(level, event, fields),
--      networks (the set of networks this server's instances can have: {host, none} with walls,
--      {host} without; nil: the body's network is checked but not applied — the resident),
--      stopping (a signal: aborted when the drain is over — running commands are killed),
--      drain_ms (set when stopping), getenv (for the child environment's pass list)
function M.handler(ctx)
  local check = auth.checker(ctx.token)
  ctx.log = ctx.log or function() end
  M.register_gauges(ctx.fleet)
  return function(req, res)
    if ctx.processes and process_routes.preview(ctx.policy(), req) then
      return process_routes.serve_preview(ctx, ctx.policy(), req, res)
    end
    if not check(req.headers and req.headers[protocol.AUTH_HEADER], req) then
      return res:send(auth.REFUSAL_STATUS, JSON, auth.REFUSAL_BODY)
    end
    if req.path == "/metrics" and req.method == "GET" then return M.metrics(res) end
    local method = protocol.ROUTES[req.path]
    local background, arg
    if method == nil and ctx.processes then
      local allow
      background, allow = process_routes.match(req.method, req.path)
      if background == false then
        return send_json(res, 405, { error = ("%s takes %s"):format(req.path, allow) }, { allow = allow })
      end
      if background then
        local snap = ctx.policy()
        local key = req.headers[protocol.THREAD_HEADER]
        local ok, why = protocol.check_thread_key(key, snap.timeouts.sandbox.max_thread_key_bytes)
        if not ok then return refuse(res, req.path, 400, why) end
        arg = select(2, process_routes.match(req.method, req.path))
        return process_routes.handle(ctx, helpers, snap, key, req, res, background, arg)
      end
    end
    if method == nil then
      return send_json(res, 404, { error = ("no route %s; the routes are %s"):format(req.path, ROUTE_LIST) })
    end
    if req.method ~= method then
      return send_json(res, 405, { error = ("%s takes %s"):format(req.path, method) }, { allow = method })
    end
    if req.path == "/healthz" then return healthz(ctx, res) end
    local snap = ctx.policy()
    local key = req.headers[protocol.THREAD_HEADER]
    local ok, why = protocol.check_thread_key(key, snap.timeouts.sandbox.max_thread_key_bytes)
    if not ok then return refuse(res, req.path, 400, why) end
    local call, status, why, reason = M.parse(snap, req.path, req.body)
    if call == nil then return refuse(res, req.path, status, why, reason) end
    return ROUTES[req.path](ctx, snap, key, call, res)
  end
end

return M
