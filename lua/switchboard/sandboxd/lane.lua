-- sandboxd's exec lane (docs/sandboxd.md "The exec lane"): Lua programs it, C executes it.
--
-- The C lane (src/lane/exec_lane.c, called by the HTTP server through http/lane_face.h) serves an
-- ORDINARY /exec of a thread whose instance is armed here, start to finish, without a Lua task: the
-- bearer, the thread key and the body checked as routes.lua would, the env merged, the command
-- spawned through the instance's spawner, heartbeats, the deadline, the answer encoded and written.
-- What it needs is given here: per policy snapshot (program: the token, budget clamp, base env,
-- max_output, kill grace, heartbeat) and per instance (arm: its spawner socket, network, counter
-- files).
--
--   local lane = lane.new(ctx, srv)    -- ctx: routes.lua's; srv: core.http.serve's server
--   lane:settled(snap, inst)           -- a Lua-path command of the fleet's inst ended ordinarily:
--                                         arm it when its instance is settled (below)
--   lane:in_use(key) → n               -- disarmed; n of its commands still in the lane
--   lane:reprogram()                   -- after a policy reload: every arm dropped, program anew
--   lane:close() → n                   -- the drain: nothing more taken; n still running
--   lane:running() → n                 -- its commands running now
--   lane:abort()                       -- the drain is over: its commands killed
--
-- Arming is Lua's decision, made per instance once it is settled: walled, awake with its own
-- file system (the kernel holds the workspace's size), its workspace checked, nothing pending
-- (a workspace note, a base capture, a retire notice). Anything that changes the instance —
-- sleep, retire, stop — disarms it first (shell/walled.lua calls r.lane_disarm). A command
-- whose outcome is not ordinary comes back here with its response open (back), and every
-- outcome is heard after its answer: metrics, the log lines, the fleet's last use. An answered
-- one, when the server logs through core.log (the engine's writer), is tallied by C — its lines
-- written there with the events and label given here, its counts and the instance's last use
-- reported in batches (report: exec_lane_report_ms after the first, and on lane:flush(), which /metrics,
-- the fleet's idle watch and the drain call); otherwise (a log function of a caller's) heard.
--
--   lane:flush()                       -- the tally so far into the metrics and idle clocks
local core = require("switchboard.core")
local metrics = require("switchboard.metrics")
local routes = require("switchboard.sandboxd.routes")
local runner_mod = require("switchboard.sandboxd.runner")
local run = require("switchboard.shell.run")
local walled = require("switchboard.shell.walled")

local C = core.exec_lane -- src/lane/exec_lane.c

local M = {}

local Lane = {}
Lane.__index = Lane

local function int(x) return math.tointeger(math.floor(x)) end

-- policies/timeouts.lua sandbox.exec_lane, exec_lane_report_ms (how long a tally waits for its
-- report) and stream_*: a policy that predates them reads the schema's defaults (policy/schema.lua)
local function wanted(snap, ctx)
  local sb = snap.timeouts.sandbox
  return sb.exec_lane and not ctx.pod and sb.ports_host_url == nil
end

-- Programs the C lane for snap (once per snapshot); false when the lane is off under it.
local function program(self, snap)
  if self.snap == snap then return self.on end
  self.snap = snap
  self.armed = {}
  self.on = wanted(snap, self.ctx)
  if not self.on then
    C.program(self.srv, nil)
    return false
  end
  local t = snap.timeouts
  C.program(self.srv, {
    token = self.ctx.token,
    max_key_bytes = int(t.sandbox.max_thread_key_bytes),
    floor_ms = int(t.bash.floor_ms), max_ms = int(t.bash.max_ms),
    default_ms = int(t.sandbox.default_budget_ms), grace_ms = int(t.bash.kill_grace_ms),
    heartbeat_ms = int(t.sandbox.heartbeat_ms), max_output = int(t.process.max_output_bytes),
    stream_at = t.sandbox.stream_at_bytes, stream_step = t.sandbox.stream_step_bytes,
    reserve_margin = t.sandbox.stream_reserve_margin, reserve_max = t.sandbox.stream_reserve_max_bytes,
    -- the counter files held open by as many instances as the descriptor budget has room for
    held_counters = self.ctx.descriptors and self.ctx.descriptors.counters or 0,
    network = snap.isolation.network, bash = run.bash_path(),
    env = routes.base_env(self.ctx, snap), headers = routes.JSON,
    back = function(res, raw, armed, limit_ms, before, gaps, remote, streamed)
      return self:back(res, raw, armed, limit_ms, before, gaps, remote, streamed)
    end,
    heard = function(armed, exit, duration_ms, gaps, handed_back, remote)
      return self:heard(armed, exit, duration_ms, gaps, handed_back, remote)
    end,
    -- the tally, when the lines C would write are core.log's (a log function of a caller's
    -- hears each command: heard)
    report = self.ctx.log == core.log and function(durations, gaps, uses)
      return self:report(durations, gaps, uses)
    end or nil,
    report_ms = int(t.sandbox.exec_lane_report_ms),
    log_request = "sandboxd.request", log_command = "sandboxd.exec",
  })
  return true
end

-- The walled record of a fleet instance and its walls instance, when settled enough to arm.
local function settled_walls(inst)
  local runner = inst.runner
  local r = runner and runner.ws
  local w = r and r.walls and r.instance
  if not (w and w.state == "ready" and w.disk and w.socket and w.cgroups and w.pid) then return nil end
  if not runner.checked or runner.note or runner.capture or r.notice or w.retired or inst.asleep then
    return nil
  end
  return r, w
end

function Lane:settled(snap, inst)
  if not program(self, snap) then return end
  local r, w = settled_walls(inst)
  if not r then return end
  local armed = self.armed[inst.key]
  if armed and armed.w == w then return end -- armed already, for this very instance
  local oom = w.cgroups.memory .. (w.host.layout.version == 2 and "/memory.events" or "/memory.oom_control")
  local key = inst.key
  -- the arming's own record: C gives it back with each outcome of a command it took (heard,
  -- back), so a command settles against the instance it ran in even after a new arming of the
  -- key or a reload dropped this one
  local armed = { w = w, r = r, inst = inst, snap = snap, key = key, label = runner_mod.label(key) }
  local ok = C.arm(self.srv, key, {
    socket = w.socket, network = inst.network or snap.isolation.network,
    oom = oom, pids = w.cgroups.pids .. "/pids.events", label = armed.label,
  }, armed)
  if not ok then return end
  self.armed[key] = armed
  r.lane_disarm = function()
    r.lane_disarm = nil
    C.disarm(self.srv, key)
  end
  -- its commands in the lane count as the instance's running ones (walled.lua running)
  r.lane_running = function() return C.running(self.srv, key) end
end

function Lane:in_use(key)
  return C.disarm(self.srv, key)
end

function Lane:flush() C.collect(self.srv) end

function Lane:reprogram()
  self.snap = nil
  self.armed = {}
  C.program(self.srv, nil)
end

function Lane:running() return C.running(self.srv) end

-- The drain is over: its commands are killed (each handed back, answered server_stopped).
function Lane:abort() C.abort(self.srv) end

function Lane:close()
  self.closed = true
  C.program(self.srv, nil)
  return C.running(self.srv)
end

-- After the answer (or the hand-back's): what the Lua path counts and logs for a command, and
-- the fleet's last use of the instance (its idle clock). Once per request: nothing here makes a
-- table the collector would have to take back but the request line's fields.
local ANSWERED, HANDED_BACK = { outcome = "answered" }, { outcome = "handed_back" }
local NOT_TIMED_OUT = { timed_out = false }

function Lane:heard(armed, exit, duration_ms, gaps, handed_back, remote)
  metrics.inc("switchboard_exec_lane_total", handed_back and HANDED_BACK or ANSWERED)
  for _ = 1, gaps do routes.heartbeat_gap() end
  local key = armed.key
  local inst = self.ctx.fleet:get(key)
  if inst then inst.idle_since = core.now_ms() end
  if handed_back then return end -- counted with its document by routes.answer_exec
  local duration = math.tointeger(math.floor(duration_ms + 0.5)) or 0
  routes.account_command(self.ctx, inst and inst.label or armed.label, NOT_TIMED_OUT, exit, duration)
  self.ctx.log("info", "sandboxd.request", { method = "POST", route = "/exec", status = 200,
    duration_ms = math.floor(duration_ms * 10 + 0.5) / 10, thread = armed.label, lane = 1,
    remote = remote ~= "" and remote or nil })
end

-- The tally of the lane's answered commands since the last report (C, exec_lane.c tally):
-- what heard would have counted for each, in batches — their durations (rounded ms, in order),
-- the heartbeat gaps, and {armed, last_used_ms, …} the armings used (the fleet's idle clock
-- moved to their last use, never back). The lines were written by C as the commands ended.
function Lane:report(durations, gaps, uses)
  if #durations > 0 then
    metrics.inc("switchboard_exec_lane_total", ANSWERED, #durations)
    routes.account_answered(durations)
  end
  if gaps > 0 then metrics.inc("switchboard_heartbeat_gaps_total", nil, gaps) end
  local fleet = self.ctx.fleet
  for i = 1, #uses, 2 do
    local inst = fleet:get(uses[i].key)
    if inst and inst.idle_since < uses[i + 1] then inst.idle_since = uses[i + 1] end
  end
end

-- A command the lane ran whose outcome is not ordinary (a deadline, a signal, a counter moved,
-- long or truncated output, …): settled and composed by the Lua path's own functions, and
-- written on the response the lane opened. Runs in a task of its own. armed: the arming the
-- command ran under (its instance, its snapshot), whatever the key's arming is now. streamed:
-- nil, or (the lane wrote stdout as it came, docs/sandboxd.md) whether it was valid UTF-8: only
-- the rest of the document is written here.
function Lane:back(res, raw, armed, limit_ms, before, gaps, remote, streamed)
  local inst = armed.inst
  local ok, err = xpcall(function()
    walled.settle(armed.r, armed.w, before, raw)
    local doc = routes.exec_document(self.ctx, armed.snap, inst, limit_ms, raw, nil, nil, "client gone")
    routes.answer_exec(self.ctx, inst, res, raw, doc, streamed)
  end, debug.traceback)
  if not ok then
    self.ctx.log("error", "sandboxd.exec_failed", { instance = inst.label or armed.label, error = err })
    if not res.finished then res:finish() end
  end
  self:heard(armed, raw.exit, raw.duration_ms, gaps, true, remote)
  self.ctx.log("info", "sandboxd.request", { method = "POST", route = "/exec", status = 200,
    duration_ms = math.floor((raw.duration_ms or 0) * 10 + 0.5) / 10, thread = armed.label, lane = 1,
    handed_back = true, remote = remote ~= "" and remote or nil })
end

function M.new(ctx, srv)
  local self = setmetatable({ ctx = ctx, srv = srv, armed = {} }, Lane)
  metrics.collector(self, Lane.flush) -- a scrape sees every command answered before it
  return self
end

return M
