-- Work in flight, counted, and the tasks waiting until there is none: the dispatcher's asks
-- (its drain waits for them) and the Slack front's card updates (its flush waits for them).
--
--   local work = in_flight.new()
--   work:enter() … work:leave()      around each piece of work
--   work:wait(signal) → true          once the count is zero (at once if it is)
--                     → false         once signal aborts (at once if it has)
--   work:go(fn, on_raise)             fn in a task of its own, counted while it runs; a raise
--                                     goes to on_raise(traceback) and the count still drops
--
-- A front's cards in flight (the Slack and GitHub fronts): the same count, a raise logged as
-- `event`, and the drain's flush, which first hurries every card still pacing itself.
--   local cards = in_flight.cards(log, event)
--   cards:go(fn)                      counted; a raise is logged (level error, event)
--   cards.hurrying                    a signal aborted by flush: a final state waits no more
--   cards:flush(signal) → true | false  as wait, after hurrying
-- A card's latest state goes from the front's update to the card's worker task through its
-- handle h: in_flight.put(h, msg) sets h.pending (a final one aborts h.final_known) and wakes
-- the worker; in_flight.next_state(h) → true once h.pending is set (it waits while it is not).
local core = require("switchboard.core")

local M = {}
local W = {}
W.__index = W

function M.new()
  return setmetatable({ count = 0, waiters = {} }, W)
end

function W:enter()
  self.count = self.count + 1
end

local function wake(w, value)
  if not w.woken then
    w.woken = true
    core.wake(w.task, value)
  end
end

function W:leave()
  assert(self.count > 0, "in_flight:leave without a matching enter")
  self.count = self.count - 1
  if self.count ~= 0 then return end
  local waiters = self.waiters
  self.waiters = {}
  for _, w in ipairs(waiters) do wake(w, true) end
end

function W:go(fn, on_raise)
  self:enter()
  core.go(function()
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then on_raise(err) end
    self:leave()
  end)
end

local Cards = setmetatable({}, { __index = W })
Cards.__index = Cards

function M.cards(log, event)
  local c = setmetatable(M.new(), Cards)
  c.log, c.event, c.hurrying = log, event, core.signal()
  return c
end

function Cards:go(fn)
  W.go(self, fn, function(err) self.log("error", self.event, { error = tostring(err) }) end)
end

function Cards:flush(signal)
  self.hurrying:abort("flushing")
  return self:wait(signal)
end

function M.put(h, msg)
  h.pending = msg
  if msg.final then
    h.final_queued = true
    h.final_known:abort("final") -- ends a progress wait: the final goes at once
  end
  local t = h.waiting
  if t then
    h.waiting = nil
    core.wake(t)
  end
end

function M.next_state(h)
  if h.pending then return true end
  h.waiting = core.current()
  core.suspend()
  return h.pending ~= nil
end

function W:wait(signal)
  if self.count == 0 then return true end
  -- An aborted signal runs on_abort at once, which would wake this task before it suspends.
  if signal and signal.aborted then return false end
  local w = { task = core.current(), woken = false }
  assert(w.task, "in_flight:wait must run in a task")
  self.waiters[#self.waiters + 1] = w
  if signal then signal:on_abort(function() wake(w, false) end) end
  return core.suspend()
end

return M
