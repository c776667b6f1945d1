-- What /proc says about the processes on this machine, read directly (no `ps`: specs also
-- run with sanitizer runtimes preloaded, which tools like ps do not survive).
local core = require("switchboard.core")

local M = {}

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function M.pids()
  local out = {}
  for _, name in ipairs(core.fs.list("/proc") or {}) do
    if name:match("^%d+$") then out[#out + 1] = tonumber(name) end
  end
  return out
end

-- Every process's argv joined with spaces, pid → text.
function M.cmdlines()
  local out = {}
  for _, pid in ipairs(M.pids()) do
    local raw = read("/proc/" .. pid .. "/cmdline")
    if raw then out[pid] = raw:gsub("%z", " ") end
  end
  return out
end

-- {pid, ppid, state} of every process.
function M.stats()
  local out = {}
  for _, pid in ipairs(M.pids()) do
    local raw = read("/proc/" .. pid .. "/stat")
    -- (not `raw and raw:match(...)`: an `and` keeps one value, and every ppid was nil)
    local state, ppid
    if raw then state, ppid = raw:match("%) (%S) (%d+)") end
    if state then out[#out + 1] = { pid = pid, ppid = tonumber(ppid), state = state } end
  end
  return out
end

function M.self_pid()
  return tonumber(read("/proc/self/stat"):match("^%d+"))
end

function M.zombie_children(ppid)
  local out = {}
  for _, p in ipairs(M.stats()) do
    if p.ppid == ppid and p.state == "Z" then out[#out + 1] = p.pid end
  end
  return out
end

function M.alive(pid)
  local raw = read("/proc/" .. pid .. "/stat")
  return raw ~= nil and raw:match("%) (%S)") ~= "Z"
end

return M
