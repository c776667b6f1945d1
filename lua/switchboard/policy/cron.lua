-- Five-field cron expressions, in UTC (policies/agents.lua `schedules`; docs/schedules.md):
--
--   minute hour day-of-month month day-of-week
--   each field: * | N | N-M | */S | N-M/S | N/S, or a comma-separated list of those;
--   months jan-dec and days sun-sat may be names; day-of-week 0 and 7 are Sunday.
--   When both day fields are restricted, a day matching either is a match (cron's rule).
--
--   cron.parse(text) → spec | nil, why
--   cron.matches(spec, t) → bool        t: seconds since the epoch (the minute it is in)
--   cron.next_after(spec, t) → seconds   the first matching minute's start after t (within
--                                        ~5 years; nil when none, e.g. "0 0 30 2 *")
local M = {}

local FIELDS = {
  { name = "minute", min = 0, max = 59 },
  { name = "hour", min = 0, max = 23 },
  { name = "day of month", min = 1, max = 31 },
  { name = "month", min = 1, max = 12,
    names = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6, jul = 7, aug = 8, sep = 9, oct = 10, nov = 11, dec = 12 } },
  { name = "day of week", min = 0, max = 7,
    names = { sun = 0, mon = 1, tue = 2, wed = 3, thu = 4, fri = 5, sat = 6 } },
}

local function value(f, s)
  local n = tonumber(s:match("^%d+$") or "")
  if not n and f.names then n = f.names[s:lower()] end
  if not n then return nil, ("%q is not a %s"):format(s, f.name) end
  if n < f.min or n > f.max then
    return nil, ("%s %d is outside %d-%d"):format(f.name, n, f.min, f.max)
  end
  return n
end

-- One field → a set {[n] = true} and whether it was "*" (unrestricted).
local function field(f, text)
  local set, any = {}, text:sub(1, 1) == "*" -- "*" and "*/S" leave the day rule to the other field
  for part in (text .. ","):gmatch("([^,]*),") do
    if part == "" then return nil, ("an empty item in the %s field %q"):format(f.name, text) end
    local range, step = part:match("^([^/]+)/(.+)$")
    range = range or part
    local s = 1
    if step then
      s = tonumber(step:match("^%d+$") or "")
      if not s or s < 1 then return nil, ("step %q in the %s field is not a positive number"):format(step, f.name) end
    end
    local lo, hi
    if range == "*" then
      lo, hi = f.min, f.max
    else
      local a, b = range:match("^([^-]+)-(.+)$")
      local err
      if a then
        lo, err = value(f, a)
        if not lo then return nil, err end
        hi, err = value(f, b)
        if not hi then return nil, err end
        if hi < lo then return nil, ("the range %s in the %s field runs backwards"):format(range, f.name) end
      else
        lo, err = value(f, range)
        if not lo then return nil, err end
        hi = step and f.max or lo -- "N/S": from N to the end, as cron reads it
      end
    end
    for n = lo, hi, s do set[n] = true end
  end
  return set, any
end

function M.parse(text)
  if type(text) ~= "string" then return nil, "must be a string" end
  local parts = {}
  for w in text:gmatch("%S+") do parts[#parts + 1] = w end
  if #parts ~= 5 then
    return nil, ("%q has %d fields; cron has 5: minute hour day-of-month month day-of-week"):format(text, #parts)
  end
  local spec = { text = text }
  for i, f in ipairs(FIELDS) do
    local set, any = field(f, parts[i])
    if not set then return nil, any end
    spec[i], spec["any" .. i] = set, any
  end
  if spec[5][7] then spec[5][0] = true end -- 7 is Sunday too
  return spec
end

-- Cron's day rule: a "*" day field leaves the other to decide; two restricted ones: either.
local function day_ok(spec, d)
  local dom, dow = spec[3][d.day] == true, spec[5][d.wday - 1] == true
  if spec.any3 or spec.any5 then return (spec.any3 or dom) and (spec.any5 or dow) end
  return dom or dow
end

function M.matches(spec, t)
  local d = os.date("!*t", t)
  return spec[1][d.min] == true and spec[2][d.hour] == true and spec[4][d.month] == true and day_ok(spec, d)
end

function M.next_after(spec, t)
  local at = (t // 60 + 1) * 60
  local limit = at + 5 * 366 * 86400
  while at <= limit do
    local d = os.date("!*t", at)
    if not spec[4][d.month] then -- to the first day of the next month
      at = M.epoch(d.year + (d.month == 12 and 1 or 0), d.month % 12 + 1, 1, 0, 0)
    elseif not day_ok(spec, d) then
      at = at - at % 86400 + 86400
    elseif not spec[2][d.hour] then
      at = at - at % 3600 + 3600
    elseif not spec[1][d.min] then
      at = at + 60
    else
      return at
    end
  end
  return nil
end

-- Seconds since the epoch of a UTC date (no os.time: it is local time).
function M.epoch(y, mo, d, h, mi)
  y = mo <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return (era * 146097 + doe - 719468) * 86400 + h * 3600 + mi * 60
end

return M
