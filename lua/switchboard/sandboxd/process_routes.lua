-- sandboxd's routes for background processes and exposed ports (docs/sandboxd.md "Background
-- processes", "Ports"), mounted by routes.lua behind the same bearer and x-thread-key as /exec
-- (the preview URLs under /ports/<token>/ excepted: their token is their credential):
--
--   POST   /processes {command, env?}  → 201 {id, pid, command, status: "running", startedAt}
--   GET    /processes                  → 200 {processes: [{id, command, status, exitCode?, …}]}
--   GET    /processes/<id>/logs        → 200 {stdout, stderr} (the tails); ?follow=1: NDJSON
--                                        lines {stream, data} as output comes, "\n" every
--                                        heartbeat, last {status, exitCode?}
--   DELETE /processes/<id>             → 200 the record (its process group killed)
--   POST   /ports {port}               → 201 {port, url}
--   GET    /ports                      → 200 {ports: [n, …]}
--   DELETE /ports/<port>               → 200 {ok: true}
--
-- `h` is routes.lua's: {instance_for, send_json, decode_object, base_env, json}.
local core = require("switchboard.core")
local envmod = require("switchboard.sandboxd.env")
local protocol = require("switchboard.shell.protocol")
local processes = require("switchboard.sandboxd.processes")
local ports = require("switchboard.sandboxd.ports")

local M = {}

local PORT_ROUTES = {
  { path = "^/ports$", methods = { POST = "expose", GET = "ports" } },
  { path = "^/ports/(%d+)$", methods = { DELETE = "unexpose" }, arg = tonumber },
}

-- name, arg — or nil (not one of these routes), or false, allow.
function M.match(method, path)
  local name, arg = processes.match(method, path)
  if name ~= nil then return name, arg end
  return processes.route(PORT_ROUTES, method, path)
end

-- The token and the path to pass on of a preview request (a path under /ports/<token>/, or a
-- host <token>.… when policy names the host-per-port form), or nil.
function M.preview(snap, req)
  local token, rest = ports.token_of(req.path)
  if token then return token, rest end
  if snap.timeouts.sandbox.ports_host_url then
    token = ports.token_of_host(req.headers and req.headers.host)
    if token then return token, req.path end
  end
  return nil
end

local function body_of(h, req, route)
  local doc, err = h.decode_object(req.body, route)
  if not doc then return nil, err.message end
  return doc
end

local ROUTE = {}

-- {name: [items]}: lua-cjson writes an empty table as {}, so an empty list is written here.
local function list_answer(h, res, name, items)
  if #items > 0 then return h.send_json(res, 200, { [name] = items }) end
  return res:send(200, { ["content-type"] = "application/json", ["cache-control"] = "no-store" },
    ('{"%s":[]}'):format(name))
end

function ROUTE.start(ctx, h, snap, key, req, res)
  local body, why = body_of(h, req, "/processes")
  if not body then return h.send_json(res, 400, { error = why }) end
  local command = body.command
  if type(command) ~= "string" or command:find("^%s*$") or command:find("\0", 1, true) then
    return h.send_json(res, 400, { error = "the /processes body needs command: a non-empty string without NUL bytes" })
  end
  local env = {}
  for name, value in pairs(h.base_env(ctx, snap)) do env[name] = value end
  for name, value in pairs(envmod.from_request(body)) do env[name] = value end
  -- the instance's network as /exec asks it (the executor sends the agent's): an instance made
  -- here is made with it, and an awake one of another network refuses, as for /exec
  local network, nwhy = protocol.check_network(body.network)
  if network == false then return h.send_json(res, 400, { error = "the request's " .. nwhy }) end
  local inst = h.instance_for(ctx, snap, key, { network = network }, "/processes", res)
  if not inst then return end
  local rec, status, text, reason = ctx.processes:start(ctx, snap, key, inst, { command = command, env = env })
  if not rec then
    ctx.fleet:release(inst)
    return h.send_json(res, status, { error = text, reason = reason })
  end
  ctx.log("debug", "sandboxd.process_started", { instance = inst.label, process = rec.id })
  return h.send_json(res, 201, processes.document(rec))
end

function ROUTE.list(ctx, h, snap, key, req, res)
  local out = {}
  for _, rec in ipairs(ctx.processes:list(key)) do out[#out + 1] = processes.document(rec) end
  return list_answer(h, res, "processes", out)
end

local function follow(ctx, snap, rec, res, h)
  res:start(200, { ["content-type"] = "application/x-ndjson", ["cache-control"] = "no-store" })
  local function line(doc) return res:write(h.json.encode(doc) .. "\n") end
  for _, stream in ipairs({ "stdout", "stderr" }) do
    local text = processes.tail_text(rec.tails[stream])
    if text ~= "" then line({ stream = stream, data = text }) end
  end
  local wake = core.signal()
  local queue, queued = {}, 0
  local limit = processes.limits(snap).process_log_bytes
  -- A follower that reads slower than the process writes gets at most the tail's worth queued:
  -- the oldest output is dropped (and a line says how much) rather than held without bound.
  local function follower(stream, bytes)
    if stream then
      queue[#queue + 1] = { stream = stream, data = bytes }
      queued = queued + #bytes
      local dropped = 0
      while queued > limit and #queue > 1 do
        local first = table.remove(queue, 1)
        if first.data then
          queued = queued - #first.data
          dropped = dropped + #first.data
        end
        dropped = dropped + (first.dropped or 0)
      end
      if dropped > 0 then table.insert(queue, 1, { dropped = dropped }) end
    else
      queue[#queue + 1] = false
    end
    wake:abort("output")
  end
  rec.followers[follower] = true
  local gone <close> = setmetatable({}, { __close = function() rec.followers[follower] = nil end })
  local interval = snap.timeouts.sandbox.heartbeat_ms
  while rec.status == "running" and not res.closed do
    if #queue == 0 then
      if core.sleep(interval, core.signal(wake, rec.done)) then res:write("\n") end
      wake = core.signal()
    end
    local items = queue
    queue, queued = {}, 0
    for _, item in ipairs(items) do
      if item then line(item) end
    end
    if not res:drain() then return end
  end
  for _, item in ipairs(queue) do
    if item then line(item) end
  end
  line({ status = rec.status, exitCode = rec.exitCode })
  res:finish()
end

function ROUTE.logs(ctx, h, snap, key, req, res, id)
  local rec = ctx.processes:get(key, id)
  if not rec then return h.send_json(res, 404, { error = "no process " .. id .. " in this thread" }) end
  if (req.query or ""):find("follow=1", 1, true) then return follow(ctx, snap, rec, res, h) end
  return h.send_json(res, 200, {
    stdout = processes.tail_text(rec.tails.stdout), stderr = processes.tail_text(rec.tails.stderr),
  })
end

function ROUTE.kill(ctx, h, snap, key, req, res, id)
  local rec = ctx.processes:get(key, id)
  if not rec then return h.send_json(res, 404, { error = "no process " .. id .. " in this thread" }) end
  ctx.processes:kill(rec, snap.timeouts.walls.stop_ms + snap.timeouts.bash.kill_grace_ms)
  return h.send_json(res, 200, processes.document(rec))
end

function ROUTE.expose(ctx, h, snap, key, req, res)
  local body, why = body_of(h, req, "/ports")
  if not body then return h.send_json(res, 400, { error = why }) end
  local port = math.tointeger(body.port) -- (lua-cjson reads every number as a float)
  if type(body.port) ~= "number" or not port or port < 1 or port > 65535 then
    return h.send_json(res, 400, { error = "the /ports body needs port: an integer from 1 to 65535" })
  end
  local base = "http://" .. (req.headers.host or "127.0.0.1")
  local url, status, text, reason = ctx.ports:expose(snap, key, port, base)
  if not url then return h.send_json(res, status, { error = text, reason = reason }) end
  return h.send_json(res, 201, { port = port, url = url })
end

function ROUTE.ports(ctx, h, snap, key, req, res)
  return list_answer(h, res, "ports", ctx.ports:list(key))
end

function ROUTE.unexpose(ctx, h, snap, key, req, res, port)
  if not ctx.ports:unexpose(key, port) then
    return h.send_json(res, 404, { error = ("port %d is not exposed in this thread"):format(port) })
  end
  return h.send_json(res, 200, { ok = true })
end

function M.handle(ctx, h, snap, key, req, res, name, arg)
  return ROUTE[name](ctx, h, snap, key, req, res, arg)
end

-- At the head: true for a preview request whose token is known, false for one whose token is
-- not, nil when the request is no preview.
function M.preview_known(ctx, req)
  local token = M.preview(ctx.policy(), req)
  if not token then return nil end
  return ctx.ports:find(token) ~= nil
end

-- A preview request (its token checked here, nothing else asked of it).
function M.serve_preview(ctx, snap, req, res)
  local token, rest = M.preview(snap, req)
  local entry = token and ctx.ports:find(token)
  if not entry then
    return res:send(404, { ["content-type"] = "text/plain; charset=utf-8" }, "no such preview URL\n")
  end
  return ports.proxy(ctx, snap, entry, rest, req, res)
end

return M
