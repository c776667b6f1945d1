-- The loop devices this server's walls attached, given back (docs/isolation.md "Loop devices
-- given back"). An instance's workspace image is attached with LOOP_CTL_GET_FREE, which makes a
-- new device whenever none is free; autoclear only detaches it when the instance's mount goes.
-- Without this every instance that ever ran at once left a device on the host for good, and
-- every sysinfo() on the host (each `bash` calls it once) walks them all.
--
--   local keeper = loop_devices.new(log)
--   keeper:release(n, kept)   -- the instance that had device n is gone (its processes reaped)
--   keeper:close(bound_ms)    -- waits (in a task, at most bound_ms) for the removals queued
--
-- Only numbers the walls helper said it attached (its "ready <pid> loop <n>") come here; a
-- device numbered below `kept` (policies/isolation.lua loop_devices_kept) stays, free, for the
-- next start (GET_FREE gives the lowest free number, so the pool is the low numbers). The rest
-- are removed with LOOP_CTL_REMOVE (core.loop_remove, on the thread pool), one at a time. The
-- kernel refuses a device still bound or open ("busy": its instance's mount not yet gone, or
-- someone else bound it meanwhile): asked again after RETRY_MS, then left, in words.
local core = require("switchboard.core")

local M = {}
local Keeper = {}
Keeper.__index = Keeper

-- The waits before each new try of a busy device: the kernel's teardown of the instance's
-- mount namespaces takes milliseconds; a device still bound after ~13 s is someone else's.
local RETRY_MS = { 100, 200, 400, 800, 1600, 3200, 6400 }

function M.new(log)
  return setmetatable({ log = log or function() end, queue = {}, queued = {}, removed = 0,
    drained = core.signal() }, Keeper)
end

-- One try of a queued device; true when it is settled (removed, gone already, or left).
local function try(self, item)
  local ok, why = core.loop_remove(item.n)
  if ok then
    self.removed = self.removed + 1
    self.log("info", "walls.loop_removed", { device = item.n })
    return true
  end
  if why == "busy" and item.tries < #RETRY_MS then
    item.tries = item.tries + 1
    item.due = core.now_ms() + RETRY_MS[item.tries]
    return false
  end
  -- gone already (ENODEV) is what we wanted; anything else is said
  if why ~= "busy" and tostring(why):find("No such device", 1, true) then return true end
  self.log("warn", "walls.loop_left", { device = item.n,
    error = why == "busy" and "still bound or open after every try (someone else's now?)" or why })
  return true
end

local function drain(self)
  while #self.queue > 0 do
    local i, soonest = 1, nil
    while i <= #self.queue do
      local item = self.queue[i]
      if item.due <= core.now_ms() and try(self, item) then
        table.remove(self.queue, i)
        self.queued[item.n] = nil
      else
        soonest = math.min(soonest or item.due, item.due)
        i = i + 1
      end
    end
    if soonest then core.sleep(math.max(1, soonest - core.now_ms())) end
  end
  self.draining = false
  self.drained:abort("drained")
  self.drained = core.signal()
end

function Keeper:release(n, kept)
  if n < kept or self.queued[n] then return end
  self.queued[n] = true
  self.queue[#self.queue + 1] = { n = n, tries = 0, due = 0 }
  if not self.draining then
    self.draining = true
    core.go(drain, self)
  end
end

function Keeper:close(bound_ms)
  if self.draining and coroutine.isyieldable() then core.sleep(bound_ms, self.drained) end
end

return M
