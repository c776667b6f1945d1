-- The life of a server process around its routes, for sandboxd and the resident alike: the
-- listening server with the policy's limits, the count of requests in flight, and the drain.
--
--   local life = lifecycle.new{event, log, on_close?, on_kill, on_stopped?, fields?}
--     event       the log events' prefix ("sandboxd" → sandboxd.draining, sandboxd.stopped)
--     on_close()  once accepting has stopped (the resident stops its fetch schedule here)
--     on_kill(t)  the drain's time is up with requests in flight: end their commands (t:
--                 timeouts.server); their answers still go out for t.flush_ms
--     on_stopped() after the requests are done or given up, before core.kill_all()
--     fields()    extra fields of the draining line
--   life:listen{host, port, handler, on_head, limits} → http server | nil, err
--                 (the handler's requests are counted; a raise passes through uncaught to the
--                 engine's one protected call, which logs it with its traceback and answers 500)
--   life:shutdown(signal_name)  stop accepting; let requests in flight finish for
--                 timeouts.server.drain_ms (a second signal skips what is left of it); then
--                 on_kill and the flush; on_stopped, core.kill_all(); every life:wait() returns
--   life:wait()  yields until the shutdown is over
--   setmetatable(srv, lifecycle.Server)  a server object whose srv.life is its lifecycle gets
--                srv:shutdown(signal_name) and srv:wait() (what launch/prologue.lua's serve calls)
local core = require("switchboard.core")
local policy = require("switchboard.policy")

local M = {}

local Life = {}
Life.__index = Life

-- The listening server's limits from a snapshot's timeouts.server.
function M.limits(snap)
  local s = snap.timeouts.server
  return {
    max_header_bytes = s.max_header_bytes, max_body_bytes = s.max_body_bytes,
    request_timeout_ms = s.request_timeout_ms, idle_timeout_ms = s.idle_timeout_ms,
    max_connections = s.max_connections, max_connections_per_peer = s.max_connections_per_peer,
    max_bodies_bytes = math.max(s.max_bodies_bytes, s.max_body_bytes),
    -- an answer is streamed under res:drain's mark, so the queue never needs more than this
    max_write_queue_bytes = 8 * 1024 * 1024,
  }
end

local function nothing() end

function M.new(opts)
  assert(type(opts.on_kill) == "function", "lifecycle.new: opts.on_kill is required")
  return setmetatable({
    event = opts.event, log = opts.log or core.log,
    on_close = opts.on_close or nothing, on_kill = opts.on_kill, on_stopped = opts.on_stopped or nothing,
    fields = opts.fields,
    state = "serving", inflight = 0, waiters = {}, force = core.signal(),
  }, Life)
end

function Life:listen(spec)
  local function done()
    self.inflight = self.inflight - 1
    if self.inflight == 0 and self.quiet then self.quiet:abort("idle") end
  end
  local handler = spec.handler
  -- one to-be-closed value for every request (its __close needs nothing of the request): two
  -- tables per request were part of each of 2,000 waiting requests (issue 43's RSS row)
  local finishing = setmetatable({}, { __close = done })
  local function counted(req, res)
    self.inflight = self.inflight + 1
    local finished <close> = finishing
    return handler(req, res)
  end
  local srv, err = core.http.serve{
    host = spec.host, port = spec.port, handler = counted, limits = spec.limits, on_head = spec.on_head,
    log_hide = spec.log_hide,
  }
  if not srv then return nil, err end
  self.server = srv
  return srv
end

-- Waits until nothing is in flight or ms pass (or, when forceable, a second signal forces the
-- way on).
local function wait_idle(self, ms, forceable)
  if self.inflight == 0 then return true end
  self.quiet = forceable and core.signal(self.force) or core.signal()
  core.sleep(ms, self.quiet)
  self.quiet = nil
  return self.inflight == 0
end

function Life:shutdown(signal_name)
  if self.state ~= "serving" then
    if self.state == "draining" then
      self.log("warn", self.event .. ".drain_skipped", { signal = signal_name, in_flight = self.inflight })
      self.force:abort("second signal")
    end
    return
  end
  self.state = "draining"
  local t = policy.current().timeouts.server
  local fields = { signal = signal_name, in_flight = self.inflight, drain_ms = t.drain_ms }
  for k, v in pairs(self.fields and self.fields() or {}) do fields[k] = v end
  self.log("info", self.event .. ".draining", fields)
  if self.server then self.server:close() end
  self.on_close()
  local killed = 0
  if not wait_idle(self, t.drain_ms, true) then
    killed = self.inflight
    self.on_kill(t)
    wait_idle(self, t.flush_ms, false) -- the killed commands' answers still go out
  end
  self.on_stopped()
  core.kill_all()
  self.state = "stopped"
  self.log("info", self.event .. ".stopped", { killed = killed, unanswered = self.inflight })
  for _, task in ipairs(self.waiters) do core.wake(task) end
  self.waiters = {}
end

function Life:wait()
  if self.state == "stopped" then return end
  self.waiters[#self.waiters + 1] = core.current()
  core.suspend()
end

-- The face a server process shows launch/prologue.lua: its lifecycle's shutdown and wait.
M.Server = {}
M.Server.__index = M.Server
function M.Server:shutdown(signal_name) return self.life:shutdown(signal_name) end
function M.Server:wait() return self.life:wait() end

return M
