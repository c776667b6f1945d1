-- What the benches compute from their samples, written once (run from the repository root:
-- `require("bench.stats")`).
local M = {}

-- The median of a list of numbers (0 for none); the list is left as it was.
function M.median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return 0 end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

return M
