-- Seen-once keys (event ids, message timestamps) for a while: an event Slack retries, or
-- that arrives on two connections during a refresh, runs once.
--
--   local seen = dedup.new{ttl_ms = 3600000, max = 20000, now_ms = core.now_ms}
--   if seen:first("Ev123") then … end     -- true the first time within ttl_ms
local M = {}
local D = {}
D.__index = D

function M.new(opts)
  return setmetatable({ ttl_ms = opts.ttl_ms, max = opts.max or 20000, now_ms = opts.now_ms,
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

-- True the first time `key` is offered (within ttl_ms); a nil key is always first.
function D:first(key)
  if key == nil then return true end
  local now = self.now_ms()
  expire(self, now)
  if self.at[key] then return false end
  self.at[key] = now
  self.tail = self.tail + 1
  self.keys[self.tail] = key
  return true
end

return M
