-- The sandboxd process around the routes: the fleet and its runner, the descriptor budget,
-- and the routes' context; the listening, the count of requests in flight and the drain are
-- server/lifecycle.lua's (shared with the resident).
--
--   local srv, err = server.start{host, port, root, token, max_instances?, log, getenv?, pod?}
--   pod = true: sandboxd's pod mode (docs/sandboxd.md "Pod mode"): the pod is the wall — one
--   thread, no walls of its own, no idle sleep (the pod's release is the thread's sleep)
--   srv.port                  the bound port
--   srv:shutdown(signal_name) the lifecycle's drain; when its time is up the commands in flight
--                             are killed (they answer the recycle-shaped server_stopped failure),
--                             and after them every instance sleeps
--   srv:wait()                yields until the shutdown is over
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local lane = require("switchboard.sandboxd.lane")
local descriptors = require("switchboard.sandboxd.descriptors")
local file_table = require("switchboard.sandboxd.file_table")
local fleet = require("switchboard.sandboxd.fleet")
local keep = require("switchboard.sandboxd.keep")
local lifecycle = require("switchboard.server.lifecycle")
local routes = require("switchboard.sandboxd.routes")
local request_log = require("switchboard.sandboxd.request_log")
local runner = require("switchboard.sandboxd.runner")
local workspace = require("switchboard.shell.workspace")
local processes = require("switchboard.sandboxd.processes")
local ports = require("switchboard.sandboxd.ports")
local metrics = require("switchboard.metrics")

local M = {}

-- The slept workspaces' budget (sandboxd/keep.lua), enforced after each sleep and every
-- KEEP_EVERY_MS (ages pass without sleeps); one pass at a time. The awake workspaces are the
-- fleet's awake_dirs, kept as instances wake and sleep (a map built per pass walked the whole
-- fleet after every sleep, and again per workspace evicted: issue 43).
local KEEP_EVERY_MS = 60000

function M.keeper(self, root, log)
  local busy, again = false, false
  local function awake_now(name) return self.fleet.awake_dirs[name] end
  local function pass()
    if busy then again = true return end
    busy = true
    repeat
      again = false
      local snap = policy.current()
      local ok, err = pcall(keep.enforce, { root = root, awake = self.fleet.awake_dirs,
        isolation = snap.isolation, record = snap.record, deadline_ms = snap.timeouts.file_op.budget_ms,
        log = log, awake_now = awake_now })
      if not ok then log("error", "sandboxd.keep_failed", { error = tostring(err) }) end
    until not again
    busy = false
  end
  return pass
end

-- The drain: the exec lane takes no more, and its commands still running are in flight for
-- the lifecycle (it waits for them as for the Lua path's).
function M.drain_lane(self)
  local running = self.lane:close()
  if running == 0 then return end
  local life = self.life
  life.inflight = life.inflight + 1
  core.go(function()
    while self.lane:running() > 0 do core.sleep(20) end
    self.lane:flush() -- the drained commands' counts, before the server stops
    life.inflight = life.inflight - 1
    if life.inflight == 0 and life.quiet then life.quiet:abort("idle") end
  end)
end

function M.start(opts)
  local log = opts.log or core.log
  local self = setmetatable({ log = log }, lifecycle.Server)
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
  self.keep_pass = M.keeper(self, opts.root, log)
  self.fleet = fleet.new{
    max_instances = function() return math.min(wanted(), self.descriptors.capacity) end,
    sleep_after_ms = function() return not opts.pod and policy.current().timeouts.sandbox.sleep_after_ms end,
    new_runner = opts.new_runner or runner.factory(opts.root, opts.walls, log,
      not opts.pod and function() self.keep_pass() end or nil),
    label = runner.label, -- a hash of the thread key: logs never carry the key
    dir_name = workspace.dir_name, -- the keeper's awake workspaces (fleet.awake_dirs)
    close_at_once = function() return policy.current().isolation.starts_at_once end, -- the shutdown's sleeps
    log = log,
    -- an instance whose commands run in the exec lane is in use: not idle
    in_use = function(key) return self.lane ~= nil and self.lane:in_use(key) > 0 end,
    -- the lane's last uses are reported in batches: brought in before the idle watch looks
    refresh = function() if self.lane then self.lane:flush() end end,
  }
  -- walled instances are held to their share of the host's file table (issue 35)
  if opts.walls then
    self.file_table = file_table.start{ instances = function() return self.fleet.instances end, log = log,
      policy = policy.current }
  end
  self.ctx = {
    fleet = self.fleet, descriptors = self.descriptors, token = opts.token, policy = policy.current, build = core.build,
    log = log, stopping = core.signal(), getenv = opts.getenv,
    -- without walls an instance shares the host's network: "none" is refused, never ignored
    networks = opts.walls and { host = true, none = true } or { host = true },
    -- what /healthz reports: "pod" (the pod is the wall), "walls" or "unwalled" (--no-walls)
    mode = opts.pod and "pod" or (opts.walls and "walls" or "unwalled"),
    -- pod mode: the one thread key this pod serves (the first it was asked for)
    pod = opts.pod and {} or nil,
    -- background processes and exposed ports (docs/sandboxd.md), per thread key
    processes = processes.new(), ports = ports.new(),
  }
  local ctx = self.ctx
  metrics.gauge("switchboard_background_processes", nil, function() return ctx.processes:running() end)
  metrics.gauge("switchboard_exposed_ports", nil, function() return ctx.ports:count() end)
  self.life = lifecycle.new{ event = "sandboxd", log = log,
    -- the exec lane takes nothing more; its running commands count as in flight
    on_close = function() if self.lane then M.drain_lane(self) end end,
    on_kill = function(t)
      self.ctx.drain_ms = t.drain_ms
      self.ctx.stopping:abort("shutdown")
      if self.lane then self.lane:abort() end
    end,
    on_stopped = function()
      if self.file_table then self.file_table:stop() end
      self.fleet:close()
    end,
  }
  local on_head, handler = request_log.wrap{ event = "sandboxd.request", log = log,
    on_head = routes.on_head(self.ctx), handler = routes.handler(self.ctx) }
  -- the budget's connection cap, not the policy's: the instances' share stays theirs
  local limits = lifecycle.limits(policy.current())
  limits.max_connections = math.min(limits.max_connections, self.descriptors.connections)
  local srv, err = self.life:listen{ host = opts.host, port = opts.port, handler = handler,
    limits = limits, on_head = on_head, log_hide = { "/ports/" } }
  if not srv then return nil, err end
  self.port = srv.port
  -- the exec lane (sandboxd/lane.lua): ordinary /exec requests of settled instances in C
  if opts.walls and not opts.pod then
    self.lane = lane.new(self.ctx, srv)
    ctx.lane = self.lane
  end
  if not opts.pod and opts.root then
    core.go(function()
      repeat
        self.keep_pass()
        core.sleep(KEEP_EVERY_MS, self.fleet.stop) -- (aborted when the fleet closes)
      until self.fleet.closed
    end)
  end
  return self
end

return M
