-- Seen-once keys (event ids, message timestamps, GitHub comments) for a while: an event Slack
-- retries, that arrives on two connections during a refresh, that is replayed after a restart,
-- or that reaches the other of two processes overlapping during a restart, runs once.
--
--   local seen = dedup.new{ttl_ms = 3600000, max = 20000, now_ms = core.now_ms,
--                          store = record?, prefix = "slack.event:", log = core.log}
--   if seen:first("Ev123") then … end     -- true the first time within ttl_ms
--
-- Memory first (a retry within this process costs nothing), then the store when one is given
-- (store/record.lua's claim: one row per key in the thread's record, kept ttl_ms, shared by
-- every process on the same file) — then first() yields. A key is marked in memory before the
-- store is asked, so two deliveries racing in one process cannot both be first. A store that
-- fails is logged and memory alone decides (the bot stays able to take asks).
local M = {}
local D = {}
D.__index = D

function M.new(opts)
  return setmetatable({ ttl_ms = opts.ttl_ms, max = opts.max or 20000, now_ms = opts.now_ms,
                        store = opts.store, prefix = opts.prefix or "", log = opts.log,
                        at = {}, keys = {}, head = 1, tail = 0 }, D)
end

-- Forget the oldest keys while they are older than ttl_ms or there are more than max.
local function expire(self, now)
  while self.head <= self.tail do
    local key = self.keys[self.head]
    if now - self.at[key] < self.ttl_ms and self.tail - self.head + 1 <= self.max then break end
    self.at[key] = nil
    self.keys[self.head] = nil
    self.head = self.head + 1
  end
end

-- True the first time `key` is offered in memory (within ttl_ms); marks it.
local function first_here(self, key)
  local now = self.now_ms()
  expire(self, now)
  if self.at[key] then return false end
  self.at[key] = now
  self.tail = self.tail + 1
  self.keys[self.tail] = key
  return true
end

-- True the first time `key` is offered (within ttl_ms); a nil key is always first.
function D:first(key)
  if key == nil then return true end
  if not first_here(self, key) then return false end
  if not self.store then return true end
  local first, err = self.store:claim(self.prefix .. key, self.ttl_ms)
  if first == nil then
    if self.log then
      self.log("error", "dedup.store_failed", { key = self.prefix .. key, error = tostring(err) })
    end
    return true
  end
  return first
end

return M
