-- Scheduled asks (policies/agents.lua `schedules`, docs/schedules.md): each schedule's cron
-- (policy/cron.lua, UTC) fires its ask through fire(entry, at_s) — the Slack front posts a new
-- thread in the schedule's channel and hands the dispatcher the ask, as a mention there.
--
--   local s = schedule.new{policy = fn → snapshot, record = rec?, fire = fn(entry, at_s),
--                          now_s = fn?, sleep = fn(ms, signal) → bool?, log = fn?}
--   s:start(stop)    in a task of its own until stop fires
--   s:tick() → fired entries' names   one pass at now_s() (the loop calls it; specs too)
--
-- Each firing is claimed in the record (rec:schedule_claim(name, at_s)): of two processes on one
-- record (a restart's overlap) one fires, and the last time is kept across restarts. At start,
-- a schedule with a time in (its last time, now] was missed while the bot was down: `missed =
-- "run_once"` fires it once now, "skip" fires nothing (the next time is on time). A schedule
-- never fired before starts counting from now. Without a record, times are kept in memory.
-- The clock (now_s, sleep) is injectable: the specs run it on a test clock.
local core = require("switchboard.core")
local cron = require("switchboard.policy.cron")

local M = {}
local S = {}
S.__index = S

function M.new(opts)
  return setmetatable({
    policy = opts.policy, record = opts.record, fire = opts.fire, log = opts.log or core.log,
    now_s = opts.now_s or function() return core.wall_ms() // 1000 end,
    sleep = opts.sleep or core.sleep,
    last = {}, -- name → the last time claimed (this process's view)
    started = {}, -- name → true once its missed runs were looked at
  }, S)
end

function S:last_of(name)
  if self.last[name] ~= nil then return self.last[name] end
  if self.record then
    local got, err = self.record:schedule_last(name)
    if got == nil then self.log("error", "schedule.record_failed", { schedule = name, error = tostring(err) }) end
    self.last[name] = got or false
  else
    self.last[name] = false
  end
  return self.last[name]
end

function S:claim(name, at)
  self.last[name] = math.max(self.last[name] or 0, at)
  if not self.record then return true end
  local ok, err = self.record:schedule_claim(name, at)
  if ok == nil then
    self.log("error", "schedule.record_failed", { schedule = name, error = tostring(err) })
    return true -- the record failed: this process alone decides (it still fires once)
  end
  return ok
end

-- A schedule's first look since this process started: what was missed while it was down.
function S:catch_up(e, spec, now)
  self.started[e.name] = true
  local last = self:last_of(e.name)
  if not last then
    self:claim(e.name, now) -- never fired: it counts from now
    return nil
  end
  local missed, at = 0, cron.next_after(spec, last)
  local newest
  while at and at <= now and missed < 100000 do
    missed, newest = missed + 1, at
    at = cron.next_after(spec, at)
  end
  if missed == 0 then return nil end
  self.log("info", "schedule.missed", { schedule = e.name, missed = missed, policy = e.missed })
  if e.missed == "run_once" and self:claim(e.name, newest) then return newest end
  self:claim(e.name, newest) -- skipped: the next time is after the newest missed one
  return nil
end

function S:tick()
  local now = self.now_s()
  local fired = {}
  for _, e in ipairs(self.policy().agents.schedules) do
    local spec = cron.parse(e.cron)
    if spec then
      local at
      if not self.started[e.name] then
        at = self:catch_up(e, spec, now)
      else
        -- the newest time that has come (a suspended host may wake past several): once
        local nxt, newest = cron.next_after(spec, self:last_of(e.name) or now), nil
        while nxt and nxt <= now do newest, nxt = nxt, cron.next_after(spec, nxt) end
        if newest and self:claim(e.name, newest) then at = newest end
      end
      if at then
        fired[#fired + 1] = e.name
        self.log("info", "schedule.fire", { schedule = e.name, at = os.date("!%Y-%m-%dT%H:%M:%SZ", at) })
        local ok, err = xpcall(self.fire, debug.traceback, e, at)
        if not ok then self.log("error", "schedule.fire_failed", { schedule = e.name, error = tostring(err) }) end
      end
    end
  end
  return fired
end

-- Seconds until the next time any schedule fires: at most policies/timeouts.lua
-- schedules.max_nap_ms, so a reload's new schedules are seen within it.
function S:nap()
  local snap = self.policy()
  local now, soonest = self.now_s(), snap.timeouts.schedules.max_nap_ms // 1000
  for _, e in ipairs(snap.agents.schedules) do
    local spec = cron.parse(e.cron)
    local nxt = spec and cron.next_after(spec, math.max(now - 1, self:last_of(e.name) or 0))
    if nxt then soonest = math.min(soonest, math.max(0, nxt - now)) end
  end
  return soonest
end

function S:start(stop)
  core.go(function()
    repeat
      self:tick()
    until not self.sleep(math.max(1, self:nap()) * 1000, stop)
  end)
end

return M
