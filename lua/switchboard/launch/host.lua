-- The host of a dispatcher: what belongs to the process that runs the dispatcher, whichever
-- front it serves (`switchboard slack`, `switchboard console`) — the thread's record in the
-- state directory (store/record.lua: conversations, runs, the thread's repository and pull
-- request, kept across restarts and expired by policy), the run pages served from it
-- (pages/routes.lua) and their address.
--
--   local host, err = host.open(snap [, getenv])   opens <state dir>/record.db
--   host.record                            for dispatcher.new{record = …}; d:restore() next
--   host.pages, host.log_hide              the pages' handler and the path prefix a log never shows
--   host.page_url(token) → url | nil       the run page's address (policy record.pages), once
--                                          a listener is known: host:listening(host, port)
--   host:keep_expiring()                   old threads expire by policy while the process runs
--   host:close()                           at the process's end
--   host:dispatcher_options(extra)         the dispatcher's options every front shares (the
--                                          record, outputs, transcripts, page_url) plus extra
--
-- And the life of the process around its front, the same for every one (M.serve): the record
-- opened, the dispatcher's threads restored, old ones expired, one listener per address the
-- front was given (its events and pages, health, metrics), SIGHUP's reload, READY, the drain
-- on TERM/INT and a kill on a second one, the record closed at the end.
--
--   return host.serve(p, front)            p: launch/prologue.lua's; returns the exit status
--
-- front (a table; the host calls, in this order):
--   front:dispatcher(host) → d             its dispatcher, made with host:dispatcher_options
--   front.listeners                        optional list of {flag, address "HOST:PORT" | nil,
--                                          serves, listen(host, port) → server | nil, err}
--                                          ("metrics" with no listen: the host's /metrics; the
--                                          others serve pages); host.servers[serves] once up
--   front:start(host) → true | nil, why    optional: connect, start what runs beside the asks
--   front:reloaded(new, errs, changes, old_version)   optional: says how a reload went
--   front:ready() → status                 READY=1's status line
--   front:drain(signal_name, kill_now)     the first TERM/INT: stop taking asks, let running
--                                          ones finish; kill_now aborts at a second signal
--   front:serve()                          until the front is done (input over, or drained)
--   front:close()                          optional: after the record is closed
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local state = require("switchboard.state")
local record_mod = require("switchboard.store.record")
local pages_routes = require("switchboard.pages.routes")
local metrics = require("switchboard.metrics")
local instance = require("switchboard.shell.instance")

local M = {}
local H = {}
H.__index = H

function M.open(snap, getenv)
  local dir = state.dir(getenv)
  core.fs.mkdir_p(dir, tonumber("700", 8))
  local path = dir .. "/record.db"
  local rec, err = record_mod.open(path, { excerpt_bytes = snap.record.excerpt_bytes })
  if not rec then
    return nil, core.error("config", ("cannot open the thread record %s: %s (check the state directory's "
      .. "permissions and free space)"):format(path, tostring(err)))
  end
  local self = setmetatable({ record = rec, stop = core.signal(), base = nil, dir = dir, servers = {},
                              pages = pages_routes.handler{ record = rec, policy = policy.current },
                              log_hide = { pages_routes.PREFIX } }, H) -- a page's token is its credential
  self.page_url = function(token)
    local pages = policy.current().record.pages
    local base = pages.base_url or self.base
    if not pages.enabled or not base then return nil end
    return base .. "/runs/" .. token
  end
  return self
end

-- A listener that serves the pages: the first one's own address is the pages' base when
-- policy names none.
function H:listening(host, port)
  self.base = self.base or ("http://%s:%d"):format(host, port)
end

function H:keep_expiring()
  self.record:keep_expiring(policy.current, self.stop)
end

function H:close()
  self.stop:abort("stopped")
  self.record:close()
end

function H:dispatcher_options(extra)
  local opts = {
    record = self.record, page_url = self.page_url,
    outputs_dir = self.dir .. "/outputs",
    transcripts_dir = self.dir .. "/transcripts",
  }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return opts
end

-- "HOST:PORT" with a numeric address ("[::1]:8080" for IPv6) → host, port | nil.
function M.host_port(text)
  local host, port = text:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = text:match("^([^:]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then return nil end
  return host, port
end

-- One listener per address given (host.servers[serves] is its server); the first that serves
-- pages is their base when policy names none; "metrics" without a listen function is the
-- host's /metrics alone (Prometheus text; keep it private). true, or nil, a config error
-- naming the one that failed.
function H:listen(event, listeners)
  for _, l in ipairs(listeners or {}) do
    local flag, where, serves = l[1], l[2], l[3]
    local listen = l[4] or (serves == "metrics" and metrics.serve)
    if where then
      local host, port = M.host_port(where)
      local srv, err = listen(host, port)
      if not srv then return nil, core.error("config", flag .. ": " .. tostring(err and err.message or err)) end
      core.log("info", event .. ".listening", { host = host, port = srv.port, serves = serves })
      self.servers[serves] = srv
      if serves ~= "metrics" then self:listening(host, srv.port) end
    end
  end
  return true
end

local EXIT_CONFIG = 78 -- launch/prologue.lua's EXIT.config

function M.serve(p, front)
  local host, err = M.open(p.snap, p.ctx.getenv)
  if not host then return p:fail(EXIT_CONFIG, err) end
  local d = front:dispatcher(host)
  d:restore() -- the threads the record keeps, before the first ask can arrive
  host:keep_expiring()
  local ok, why = host:listen(p.name, front.listeners)
  if ok and front.start then ok, why = front:start(host) end
  if not ok then
    host:close()
    return p:fail(EXIT_CONFIG, why)
  end
  p:reload_on_hup(front.reloaded and function(...) return front:reloaded(...) end)
  p:on_stop(function(name, kill_now) front:drain(name, kill_now) end,
    function(name) d:kill("stopped by a second SIG" .. name) end)
  p:ready(front:ready())
  front:serve()
  host:close()
  if front.close then front:close() end
  instance.close_all() -- the local executor's walls: their cgroups go with the process
  return 0
end

return M
