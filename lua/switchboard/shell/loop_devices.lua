-- The loop devices this server's walls attached, given back (docs/isolation.md "Loop devices
-- given back"). An instance's workspace image is attached with LOOP_CTL_GET_FREE, which makes a
-- new device whenever none is free; autoclear only detaches it when the instance's mount goes.
-- Without this every instance that ever ran at once left a device on the host for good, and
-- every sysinfo() on the host (each `bash` calls it once) walks them all.
--
--   local keeper = loop_devices.new(log, records?, in_use?)
--   keeper:release(n, kept, image?) -- the instance that had device n is gone (its processes
--                                reaped); image: the workspace image it was mounted from
--   keeper:adopt(n, kept)     -- a dead server's recorded device: recorded as ours, then released
--   keeper:close(bound_ms)    -- waits (in a task, at most bound_ms) for the removals queued,
--                                AT_CLOSE at once → the numbers still queued at its end
--
-- records: the server's loops/ directory (shell/walls_dir.lua), where the walls helper records
-- each device it attaches; a device's record is dropped once it is settled here (removed, gone,
-- left to someone else, or kept in the pool), so what is left is still ours to give back.
-- in_use(n): whether one of our own instances is mounted from device n now (a dead server's
-- device, adopted, that our next start took before its removal): not tried again, nor forgotten
-- — that instance's stop releases it.
--
-- Only numbers the walls helper said it attached (its "ready <pid> loop <n>") come here; a
-- device numbered below `kept` (policies/isolation.lua loop_devices_kept) stays, free, for the
-- next start (GET_FREE gives the lowest free number, so the pool is the low numbers). The rest
-- are removed with LOOP_CTL_REMOVE (core.loop_remove, on the thread pool), PARALLEL at a time. The
-- kernel refuses a device still bound or open ("busy": its instance's mount not yet gone, or
-- someone else bound it meanwhile): asked again after RETRY_MS, then left, in words.
local core = require("switchboard.core")

local M = {}
local Keeper = {}
Keeper.__index = Keeper

-- The waits before each new try of a busy device: the kernel's teardown of the instance's
-- mount namespaces takes milliseconds; a device still bound after ~13 s is someone else's —
-- unless it is still backed by the image its instance had (/sys/block/loopN/loop/backing_file):
-- then that instance's mount is still being released (a loaded host's teardown: nothing bounds
-- it), and it is asked again every RETRY_MS's last for LINGER_MS since its release, then kept
-- recorded for the next start.
local RETRY_MS = { 100, 200, 400, 800, 1600, 3200, 6400 }
local LINGER_MS = 120000
-- Removals at once. Each waits ~45 ms on the kernel (the block layer's RCU grace periods), not
-- on a CPU, and side by side they do not wait for each other (8 at once: 6 ms a device): two
-- at once halve a fleet's teardown and leave libuv's pool (4 threads: the store, core.fs) room.
local PARALLEL = 2

function M.new(log, records, in_use)
  return setmetatable({ log = log or function() end, records = records, in_use = in_use or function() return false end,
    queue = {}, queued = {}, removed = 0, workers = 0, drained = core.signal(), wake = core.signal() }, Keeper)
end

-- Device n is no longer ours to give back: its record goes.
local function forget(self, n)
  if self.records then os.remove(self.records .. "/" .. n) end
end

-- The file device n is bound to now ("… (deleted)" for one removed since), or nil: free.
local function backing(n)
  local text = core.fs.read_file(("/sys/block/loop%d/loop/backing_file"):format(n))
  return text and (text:gsub("\n$", "")) or nil
end

-- Whether the device is still backed by the image its instance was mounted from.
local function lingers(item)
  local now = item.image and backing(item.n)
  return now ~= nil and now:sub(1, #item.image) == item.image
end

-- One try of a queued device; true when it is settled (removed, gone already, left, or one of
-- our instances' again: then "ours", and its record stays).
local function try(self, item)
  local ok, why = core.loop_remove(item.n)
  if not ok and why == "busy" and self.in_use(item.n) then return true, "ours" end
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
  if why == "busy" and lingers(item) then
    if core.now_ms() - item.since < LINGER_MS then
      item.due = core.now_ms() + RETRY_MS[#RETRY_MS]
      return false
    end
    self.log("warn", "walls.loop_lingers", { device = item.n, error = ("still mounted from %s after %d s: "
      .. "kept recorded for the next start"):format(item.image, LINGER_MS // 1000) })
    return true, "ours"
  end
  -- gone already (ENODEV: someone removed it — another server that had the same number before
  -- us) is what we wanted, said all the same; anything else is a warning
  if why ~= "busy" and tostring(why):find("No such device", 1, true) then
    self.log("info", "walls.loop_gone", { device = item.n })
    return true
  end
  local bound = why == "busy" and backing(item.n)
  self.log("warn", "walls.loop_left", { device = item.n, error = why ~= "busy" and why
    or bound and ("still bound after every try, to %s: someone else's now"):format(bound)
    or "still open after every try, though bound to no file: someone else's now?" })
  return true
end

-- The queued device due first, taken out of the queue (its worker puts it back if the kernel
-- says busy); else nil and when the soonest is due.
local function take(self)
  local now, soonest = core.now_ms(), nil
  for i, item in ipairs(self.queue) do
    if item.due <= now then return table.remove(self.queue, i) end
    soonest = math.min(soonest or item.due, item.due)
  end
  return nil, soonest
end

-- One of at most PARALLEL workers: tries due devices until none is queued.
local function work(self)
  while true do
    local item, soonest = take(self)
    if item then
      local settled, ours = try(self, item)
      if settled then
        self.queued[item.n] = nil
        if not ours then forget(self, item.n) end
      else
        self.queue[#self.queue + 1] = item
      end
    elseif soonest then
      core.sleep(math.max(1, soonest - core.now_ms()), self.wake) -- (close wakes it early)
    else
      break
    end
  end
  self.workers = self.workers - 1
  if self.workers == 0 then
    self.drained:abort("drained")
    self.drained = core.signal()
  end
end

function Keeper:release(n, kept, image)
  if self.queued[n] then return end
  if n < kept then return forget(self, n) end -- the pool's: free for the next start, anyone's
  self.queued[n] = true
  self.queue[#self.queue + 1] = { n = n, tries = 0, due = 0, image = image, since = core.now_ms() }
  if self.workers < PARALLEL then
    self.workers = self.workers + 1
    core.go(work, self)
  end
end

function Keeper:adopt(n, kept)
  if self.records then
    local f = io.open(self.records .. "/" .. n, "w")
    if f then f:close() end
  end
  self:release(n, kept)
end

-- The numbers queued now, lowest first.
function Keeper:pending()
  local out = {}
  for n in pairs(self.queued) do out[#out + 1] = n end
  table.sort(out)
  return out
end

-- At the server's stop nothing else needs libuv's pool: as many removals at once as it has
-- threads, so a large fleet's devices are given back within the stop's bound.
local AT_CLOSE = 4

function Keeper:close(bound_ms)
  -- the stop's time is for tries, not for a busy device's backoff: every queued one is due now
  for _, item in ipairs(self.queue) do item.due = 0 end
  self.wake:abort("closing")
  self.wake = core.signal()
  while self.workers > 0 and self.workers < AT_CLOSE and #self.queue > self.workers do
    self.workers = self.workers + 1
    core.go(work, self)
  end
  if self.workers > 0 and coroutine.isyieldable() then core.sleep(bound_ms, self.drained) end
  return self:pending()
end

return M
