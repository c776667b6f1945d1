-- One info line per request a server answers through its routes (sandboxd and the resident,
-- which share them): who asked for what and what they got, so an operator sees a bot with the
-- wrong token (401), a client on the wrong path (404) and every command's status and time.
--
--   local on_head, handler = request_log.wrap{event, log, on_head, handler}
--
-- Both the head hook's own answers (401, 404, 405, 400 — the body never read) and the
-- handler's are logged, in the same shape:
--   info <event> method=POST route=/exec status=200 duration_ms=12.3 thread=t-3f2a… remote=127.0.0.1
-- route is the request's path, cut to 48 bytes with bytes outside printable ASCII as '?' (a
-- client's bytes: never the query, which is not logged). thread is runner.label of the
-- X-Thread-Key header — the first 12 hex digits of its SHA-256 — when the request carries one,
-- the same label the fleet's and the instance's lines use. A thread key names a chat thread,
-- not a secret, but it is not spread to log stores either: the hash correlates lines and
-- no more. Nothing else of the request is logged: never a header (the bearer), the body, an
-- env value or a token.
local core = require("switchboard.core")
local protocol = require("switchboard.shell.protocol")
local runner = require("switchboard.sandboxd.runner")

local M = {}

local ROUTE_MAX = 48

function M.route_of(path)
  path = tostring(path or "")
  -- a preview URL's token is its only credential (sandboxd/ports.lua): never in a log line
  if path:find("^/ports/%x%x%x%x%x%x%x%x") then return "/ports/<hidden>" end
  -- the usual case (/exec): short and printable, logged as it is, with no copy made
  if #path <= ROUTE_MAX and not path:find("[^\33-\126]") then return path end
  local cut = path:sub(1, ROUTE_MAX):gsub("[^\33-\126]", "?")
  if #path > ROUTE_MAX then cut = cut .. "..." end
  return cut
end

local function line(opts, req, status, t0)
  local key = req.headers and req.headers[protocol.THREAD_HEADER]
  opts.log("info", opts.event, {
    method = req.method, route = M.route_of(req.path), status = status,
    duration_ms = math.floor((core.now_ms() - t0) * 10 + 0.5) / 10,
    thread = type(key) == "string" and key ~= "" and runner.label(key) or nil,
    remote = req.remote_addr,
  })
end

-- opts: event ("sandboxd.request" | "resident.request"), log (level, event, fields),
--       on_head (the head hook: req → nil | status, headers, body), handler (req, res).
function M.wrap(opts)
  local on_head, handler = opts.on_head, opts.handler
  local function head(req)
    local t0 = core.now_ms()
    local status, headers, body = on_head(req)
    if status ~= nil then line(opts, req, status, t0) end
    return status, headers, body
  end
  -- (one metatable for every request: a table, a metatable and a closure per request were
  -- ~0.3 KiB of each waiting request, 2,000 of them at once in issue 43's row)
  local logging = { __close = function(rec, err)
    local status = rec.res.status
    if status == 0 then status = err ~= nil and 500 or 204 end
    line(opts, rec.req, status, rec.t0)
  end }
  local function handle(req, res)
    -- logged however the handler ends: a raise before anything was sent is answered by the
    -- server once it passes through (the engine's protected call logs the traceback)
    -- (500), one that returned without answering gets a 204
    local logged <close> = setmetatable({ req = req, res = res, t0 = core.now_ms() }, logging)
    return handler(req, res)
  end
  return on_head and head or nil, handle
end

return M
