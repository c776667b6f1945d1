-- Slots of short-lived values with a reuse margin and single-flight fills
-- (docs/contract.md#credential-freshness).
--
--   local c = cache.new{wall_ms = core.wall_ms, margin_ms = function() return 25 * 60000 end}
--   local entry, err = c:get("read@678", function() return mint() end)
--
-- A slot's entry ({expires_ms = epoch ms | nil, ...}) is reused only while it still has at
-- least margin_ms() left; otherwise — or when there is none — fill() runs. An entry without
-- expires_ms is never reused (a token whose lifetime we could not read is used once); one
-- with expires_ms = math.huge never expires. While a fill runs, every other task asking for
-- the same slot waits for it (core.suspend/core.wake) and gets its outcome: concurrent
-- requests share one mint. A failed fill caches nothing, so the next request tries again.
-- Slots are independent: the read and write tokens never share one.
local core = require("switchboard.core")

local M = {}

local Cache = {}
Cache.__index = Cache

-- opts: wall_ms (function → epoch ms; default core.wall_ms), margin_ms (function → ms, read
-- at every get so a policy reload applies to the next request)
function M.new(opts)
  opts = opts or {}
  return setmetatable({
    wall_ms = opts.wall_ms or core.wall_ms,
    margin_ms = opts.margin_ms or function() return 0 end,
    slots = {},
    stats = { fills = {}, reuses = {}, waits = {} },
  }, Cache)
end

local function bump(t, key) t[key] = (t[key] or 0) + 1 end

-- Is this entry still good for at least the margin?
function Cache:fresh(entry)
  if entry == nil or entry.expires_ms == nil then return false end
  return entry.expires_ms - self.wall_ms() >= self.margin_ms()
end

-- → entry, how ("reused" | "filled" | "shared") | nil, err
function Cache:get(key, fill)
  local slot = self.slots[key]
  if slot == nil then
    slot = {}
    self.slots[key] = slot
  end
  if self:fresh(slot.entry) then
    bump(self.stats.reuses, key)
    return slot.entry, "reused"
  end
  if slot.waiters then
    bump(self.stats.waits, key)
    local task = core.current()
    if task == nil then error("github cache: get() must run in a task", 2) end
    slot.waiters[#slot.waiters + 1] = task
    local entry, err = core.suspend()
    if entry == nil then return nil, err end
    return entry, "shared"
  end

  slot.waiters = {}
  bump(self.stats.fills, key)
  local ok, entry, err = pcall(fill)
  local raised = nil
  if not ok then
    raised, entry = entry, nil
    err = core.error("github",
      "getting a GitHub credential failed inside switchboard (a bug; see the log)", { code = "infra" })
  elseif entry == nil and err == nil then
    err = core.error("github", "the credential source gave no credential and no reason (a bug; see the log)",
      { code = "infra" })
  end
  if entry ~= nil then slot.entry = entry end
  local waiters = slot.waiters
  slot.waiters = nil
  for _, task in ipairs(waiters) do core.wake(task, entry, err) end
  if raised ~= nil then error(raised, 0) end
  if entry == nil then return nil, err end
  return entry, "filled"
end

-- Drop a slot's entry (a looked-up installation that turned out to be gone).
function Cache:forget(key)
  local slot = self.slots[key]
  if slot then slot.entry = nil end
end

-- The entry a slot holds now (fresh or not), for describing and tests.
function Cache:peek(key)
  local slot = self.slots[key]
  return slot and slot.entry
end

return M
