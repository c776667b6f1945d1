-- The console's output split into cards (blank-line separated blocks), for the console specs.
local M = {}

function M.blocks(out)
  local list = {}
  for b in (out .. "\n\n"):gmatch("(.-)\n\n") do
    if b ~= "" then list[#list + 1] = b end
  end
  return list
end

-- The first card matching a Lua pattern, or nil.
function M.find(out, pattern)
  for _, b in ipairs(M.blocks(out)) do
    if b:find(pattern) then return b end
  end
  return nil
end

return M
