-- Message templates: text with {name} placeholders, filled from a table.
-- Placeholders are checked at load (an unknown one is refused), so filling never raises.

local M = {}

-- Returns nil when the template is fine, else a message.
-- allowed: set of placeholder names; requires: list of strings the text must contain
-- (a placeholder written "{x}" or a literal such as "timeoutMs").
function M.check(text, allowed, requires)
  if type(text) ~= "string" then return "must be a string" end
  if text:find("^%s*$") then return "must not be empty" end
  if text:find("\n") then return "must be one line" end
  for name in text:gmatch("{([%w_]+)}") do
    if not allowed[name] then
      local names = {}
      for k in pairs(allowed) do names[#names + 1] = "{" .. k .. "}" end
      table.sort(names)
      return string.format("unknown placeholder {%s} (known: %s)", name,
        #names > 0 and table.concat(names, ", ") or "none")
    end
  end
  for _, needed in ipairs(requires or {}) do
    if not text:find(needed, 1, true) then
      return string.format("must contain %s", needed)
    end
  end
  return nil
end

-- A template split once into {literal, name, literal, name, …, literal}: the texts come from
-- the policies, so there are few of them and each is filled over and over (a decision's cost
-- is mostly this). The cache is dropped whole if it ever grows past CACHE_MAX texts.
local CACHE_MAX = 512
local cache, cached = {}, 0

local function compile(text)
  local parts, pos = {}, 1
  for at, name, after in text:gmatch("(){([%w_]+)}()") do
    parts[#parts + 1] = text:sub(pos, at - 1)
    parts[#parts + 1] = name
    pos = after
  end
  parts[#parts + 1] = text:sub(pos)
  return parts
end

-- Fill {name} from vars; a missing var leaves the placeholder as written.
function M.fill(text, vars)
  local parts = cache[text]
  if parts == nil then
    if cached >= CACHE_MAX then cache, cached = {}, 0 end
    parts = compile(text)
    cache[text], cached = parts, cached + 1
  end
  local n = #parts
  if n == 1 then return parts[1] end
  local out = {}
  for i = 1, n - 1, 2 do
    out[i] = parts[i]
    local name = parts[i + 1]
    local v = vars[name]
    if v == nil then out[i + 1] = "{" .. name .. "}" else out[i + 1] = tostring(v) end
  end
  out[n] = parts[n]
  return table.concat(out)
end

return M
