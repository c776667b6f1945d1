-- The sandboxd process around the routes: the listening server with its limits, the fleet and
-- its runner, the count of requests in flight, and the drain on TERM.
--
--   local srv, err = server.start{host, port, root, token, max_instances?, log, getenv?, pod?}
--   pod = true: sandboxd's pod mode (docs/sandboxd.md "Pod mode"): the pod is the wall — one
--   thread, no walls of its own, no idle sleep (the pod's release is the thread's sleep)
--   srv.port                  the bound port
--   srv:shutdown(signal_name) stop accepting (server:close()); let requests in flight finish for
--                             timeouts.server.drain_ms; then kill their commands (they answer
--                             the recycle-shaped server_stopped failure) and give them
--                             timeouts.server.flush_ms to send it; then every instance sleeps,
--                             core.kill_all(), and srv:wait() returns. A second signal during the
--                             drain skips what is left of it (the flush still happens).
--   srv:wait()                yields until the shutdown is over
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local descriptors = require("switchboard.sandboxd.descriptors")
local fleet = require("switchboard.sandboxd.fleet")
local routes = require("switchboard.sandboxd.routes")
local request_log = require("switchboard.sandboxd.request_log")
local runner = require("switchboard.sandboxd.runner")

local M = {}

local Server = {}
Server.__index = Server

local function limits_of(snap)
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
M.limits_of = limits_of -- the resident listens with the same limits

function M.start(opts)
  local log = opts.log or core.log
  local self = setmetatable({
    state = "serving", inflight = 0, log = log, waiters = {}, force = core.signal(),
  }, Server)
  local max = opts.max_instances
  local snap = policy.current()
  if opts.pod then max = 1 end
  local function wanted() return max or policy.current().timeouts.sandbox.max_instances end
  -- The open-files limit is sized for the fleet now; a fleet larger than what fits is refused
  -- in words (fleet-busy) at the fit, never by EMFILE (issue 28).
  self.descriptors = descriptors.size{
    max_instances = wanted(), max_connections = snap.timeouts.server.max_connections,
    spares = opts.walls and snap.isolation.spare_instances or 0, log = log,
  }
  self.fleet = fleet.new{
    max_instances = function() return math.min(wanted(), self.descriptors.capacity) end,
    sleep_after_ms = function() return not opts.pod and policy.current().timeouts.sandbox.sleep_after_ms end,
    new_runner = opts.new_runner or runner.factory(opts.root, opts.walls, log),
    label = runner.label, -- a hash of the thread key: logs never carry the key
    log = log,
  }
  self.ctx = {
    fleet = self.fleet, descriptors = self.descriptors, token = opts.token, policy = policy.current, build = core.build,
    log = log, stopping = core.signal(), getenv = opts.getenv,
    -- without walls an instance shares the host's network: "none" is refused, never ignored
    networks = opts.walls and { host = true, none = true } or { host = true },
    -- what /healthz reports: "pod" (the pod is the wall), "walls" or "unwalled" (--no-walls)
    mode = opts.pod and "pod" or (opts.walls and "walls" or "unwalled"),
    -- pod mode: the one thread key this pod serves (the first it was asked for)
    pod = opts.pod and {} or nil,
  }
  local on_head, handler = request_log.wrap{ event = "sandboxd.request", log = log,
    on_head = routes.on_head(self.ctx), handler = routes.handler(self.ctx) }
  -- The count drops however the handler ends; a raise passes through uncaught to the engine's
  -- one protected call (which logs it with its traceback and answers 500).
  local function done()
    self.inflight = self.inflight - 1
    if self.inflight == 0 and self.quiet then self.quiet:abort("idle") end
  end
  local function counted(req, res)
    self.inflight = self.inflight + 1
    local finished <close> = setmetatable({}, { __close = done })
    return handler(req, res)
  end
  -- the budget's connection cap, not the policy's: the instances' share stays theirs
  local limits = limits_of(policy.current())
  limits.max_connections = math.min(limits.max_connections, self.descriptors.connections)
  local ok, srv, err = pcall(core.http.serve, {
    host = opts.host, port = opts.port, handler = counted, limits = limits,
    on_head = on_head,
  })
  if not ok then return nil, core.error("listen", tostring(srv)) end
  if not srv then return nil, err end
  self.server = srv
  self.port = srv.port
  return self
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

function Server:shutdown(signal_name)
  if self.state ~= "serving" then
    if self.state == "draining" then
      self.log("warn", "sandboxd.drain_skipped", { signal = signal_name, in_flight = self.inflight })
      self.force:abort("second signal")
    end
    return
  end
  self.state = "draining"
  local t = policy.current().timeouts.server
  self.log("info", "sandboxd.draining", {
    signal = signal_name, in_flight = self.inflight, drain_ms = t.drain_ms,
  })
  self.server:close()
  local clean = wait_idle(self, t.drain_ms, true)
  local killed = 0
  if not clean then
    killed = self.inflight
    self.ctx.drain_ms = t.drain_ms
    self.ctx.stopping:abort("shutdown")
    wait_idle(self, t.flush_ms, false) -- the killed commands' answers still go out
  end
  self.fleet:close()
  core.kill_all()
  self.state = "stopped"
  self.log("info", "sandboxd.stopped", { killed = killed, unanswered = self.inflight })
  for _, task in ipairs(self.waiters) do core.wake(task) end
  self.waiters = {}
end

function Server:wait()
  if self.state == "stopped" then return end
  self.waiters[#self.waiters + 1] = core.current()
  core.suspend()
end

return M
