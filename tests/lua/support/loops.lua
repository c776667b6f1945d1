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

-- What the servers (their logs: `log`) said of device n: the path it took.
function M.said(n, log)
  local function said(event) return log:find(("walls%%.%s device=%d%%f[^%%d]"):format(event, n)) ~= nil end
  if said("loop_removed") then return "removed" end
  if said("loop_gone") then return "gone already (someone else removed it)" end
  if said("loop_left") then
    return "left: " .. (log:match(("walls%%.loop_left device=%d%%f[^%%d][^\n]*error=\"([^\"]*)\""):format(n)) or "?")
  end
  for devices in log:gmatch("walls%.loops_recorded devices=\"?([%d ]*)") do
    for d in devices:gmatch("%d+") do
      if tonumber(d) == n then return "still queued at the stop: recorded for the next start" end
    end
  end
  return "nothing said of it"
end

-- The numbers recorded now in the walls directories under `base` (switchboard-walls-*/loops/N):
-- devices a server left for the next start to give back.
function M.recorded(base)
  local out = {}
  for _, entry in ipairs(core.fs.list(base) or {}) do
    local name = type(entry) == "table" and entry.name or entry
    if name:match("^switchboard%-walls%-") then
      for _, e in ipairs(core.fs.list(base .. "/" .. name .. "/loops") or {}) do
        local n = tonumber(type(e) == "table" and e.name or e)
        if n then out[n] = true end
      end
    end
  end
  return out
end

-- The numbers of `set` (devices attached to files under `root`) not given back. What matters is
-- that none is lost: a device is accounted for when a server said it removed it (or found it
-- gone: if its number exists again, another walled server's GET_FREE made it anew — the suite
-- runs them side by side and the kernel hands out the lowest free number at once), when it is
-- still recorded under `base` for the next start (a stop's bound, timeouts walls.loops_ms, ran
-- out while a busy host released its mount), or when it is gone or someone else's now (bound
-- to a file not under `root`). One that is none of these — free or bound under `root`, and
-- unrecorded — is lost.
function M.left_behind(set, root, log, base)
  local left, recorded = {}, base and M.recorded(base) or {}
  for n in pairs(set) do
    local path = M.said(n, log)
    if path ~= "removed" and not path:find("^gone") and not recorded[n] then
      local backing = S.read(("/sys/block/loop%d/loop/backing_file"):format(n))
      local theirs = backing and backing:sub(1, #root + 1) ~= root .. "/"
      if path == "nothing said of it" or (core.fs.exists(("/sys/block/loop%d"):format(n)) and not theirs) then
        left[#left + 1] = "loop" .. n
      end
    end
  end
  table.sort(left)
  return left
end

-- "loopN: what was said of it (what it is now)" for each of `left`.
function M.paths(left, log)
  local out = {}
  for _, name in ipairs(left) do
    local n = tonumber(name:match("%d+"))
    local backing = S.read(("/sys/block/loop%d/loop/backing_file"):format(n))
    local now = not core.fs.exists("/sys/block/" .. name) and "gone now"
      or backing and ("bound now to " .. backing:gsub("\n$", "")) or "free now"
    out[#out + 1] = name .. ": " .. M.said(n, log) .. " (" .. now .. ")"
  end
  return table.concat(out, "; ")
end

return M
