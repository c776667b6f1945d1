-- The loop devices a walled server's instances are given (docs/isolation.md "Loop devices given
-- back"), as the specs of their release see them: in /sys/block and in the server's lines.
local core = require("switchboard.core")
local S = require("support.sandbox")

local M = {}

-- A shell command's standard output, or nil when it failed.
function M.sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  return ok and out or nil
end

-- The loop devices bound to a file under `root` (a server's workspaces), by number.
function M.under(root)
  local out = {}
  for _, name in ipairs(core.fs.list("/sys/block") or {}) do
    local n = tonumber(name:match("^loop(%d+)$") or "")
    local backing = n and S.read("/sys/block/" .. name .. "/loop/backing_file")
    if backing and backing:sub(1, #root + 1) == root .. "/" then out[n] = true end
  end
  return out
end

-- A server's lines about its loop devices and its sweep — and those naming any of `also` (a
-- failure's explanation).
function M.lines(log, also)
  local out = {}
  for line in log:gmatch("[^\n]+") do
    local keep = line:find("walls.loop", 1, true) or line:find("walls.swept", 1, true)
    for _, word in ipairs(also or {}) do keep = keep or line:find(word, 1, true) end
    if keep then out[#out + 1] = line end
  end
  return table.concat(out, "\n")
end

return M
