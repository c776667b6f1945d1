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

-- Fill {name} from vars; a missing var leaves the placeholder as written.
function M.fill(text, vars)
  return (text:gsub("{([%w_]+)}", function(name)
    local v = vars[name]
    if v == nil then return nil end
    return tostring(v)
  end))
end

return M
