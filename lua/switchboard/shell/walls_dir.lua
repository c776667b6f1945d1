-- A walled server's own directory (docs/isolation.md "A killed server's leftovers"):
-- <base>/switchboard-walls-<pid>-<8 hex>, 0700, holding its instances' spawner sockets, the
-- bridge's rules, `owner` (its pid and start time) and `loops/`, where the walls helper records
-- each loop device it attaches (an empty file named by the number, `hold --loop-record`) before
-- anything else can fail. The server forgets a record once the device is given back or put in
-- the pool (shell/loop_devices.lua); what is left says which devices are still its own.
--
--   local dir, err = walls_dir.open{ pid, deadline_ms, path }   → dir.path, dir.records
--   walls_dir.sweep{ pid, euid, path, deadline_ms, adopt = function(n) end }
--     → { dirs = removed, devices = adopted, mounted = left (something mounted under it) }
--   dir:recorded() → { n, ... }      the numbers recorded now
--   dir:close() → true | false, n    removed; or kept, with n records left for the next start
--
-- The base: systemd's RuntimeDirectory= ($RUNTIME_DIRECTORY's first entry: /run/switchboard
-- under deploy/systemd/switchboard-sandboxd.service, kept across restarts by
-- RuntimeDirectoryPreserve=yes and gone at reboot, like the loop devices it records — the unit's
-- PrivateTmp= /tmp is removed when the unit stops, a crash too, taking the records with it),
-- else /tmp. A base too long for a socket path (sun_path: 108 bytes) is /tmp.
local core = require("switchboard.core")
local run = require("switchboard.shell.run")
local uids = require("switchboard.shell.uids")

local M = {}
local Dir = {}
Dir.__index = Dir

local NAME = "switchboard-walls-%d-%s"
local NAME_PATTERN = "^switchboard%-walls%-(%d+)%-%x%x%x%x%x%x%x%x$"
-- base + "/switchboard-walls-<7 digits>-<8 hex>/i<5 digits>.sock" must fit sun_path (108 with
-- its NUL): 40 bytes of name and socket, so a base of at most 60.
local BASE_MAX = 60

-- Not $TMPDIR: a private one (0700 somewhere on its path, as a spec's or a login's) cannot be
-- passed by the instances' uids, and the walls' binds out of this directory then fail
-- ("bwrap: Can't find source path /proc/self/fd/5: Permission denied").
function M.base()
  local dir = ((os.getenv("RUNTIME_DIRECTORY") or ""):match("^[^:]+") or ""):gsub("/+$", "")
  if dir:sub(1, 1) == "/" and #dir <= BASE_MAX and core.fs.exists(dir) then return dir end
  return "/tmp"
end

local function numbers(dir)
  local out = {}
  for _, name in ipairs(core.fs.list(dir) or {}) do
    if type(name) == "table" then name = name.name end
    local n = type(name) == "string" and name:match("^%d+$") and tonumber(name)
    if n then out[#out + 1] = n end
  end
  table.sort(out)
  return out
end

function M.open(opts)
  local base = opts.base or M.base()
  local path = base .. "/" .. NAME:format(opts.pid, core.crypto.hex(core.crypto.random_bytes(4)))
  local self = setmetatable({ path = path, records = path .. "/loops" }, Dir)
  for _, dir in ipairs({ path, self.records }) do
    local ok, err = core.fs.mkdir_p(dir, tonumber("700", 8))
    if not ok then return nil, core.error("io", "cannot create " .. dir .. ": " .. tostring(err and err.message)) end
  end
  local f = io.open(path .. "/owner", "w")
  local ok = f and f:write(("pid=%d\nstarted=%s\n"):format(opts.pid, tostring(uids.started(opts.pid))))
  if f then ok = f:close() and ok end
  if not ok then return nil, core.error("io", "cannot write " .. path .. "/owner") end
  return self
end

function Dir:recorded() return numbers(self.records) end

-- Whether anything is mounted at or under dir, in our mount namespace (a directory with a mount
-- below is not ours to remove: remove_tree would walk into the mounted file system).
local function mounted_under(dir)
  local text = core.fs.read_file("/proc/self/mountinfo") or ""
  for point in text:gmatch("[^\n]*\n?") do
    local mp = point:match("^%S+ %S+ %S+ %S+ (%S+)")
    if mp and (mp == dir or mp:sub(1, #dir + 1) == dir .. "/") then return true end
  end
  return false
end

function Dir:close()
  local left = #self:recorded()
  if left > 0 or mounted_under(self.path) then return false, left end
  core.fs.remove_tree(self.path)
  return true
end

-- Whether the server that made `dir` (pid in its name) is gone: no such process, or the pid
-- now another process's (its start time not the one `owner` recorded). A directory without
-- `owner` (made before it was written) counts as gone only when its pid is.
local function gone(dir, pid)
  local now = uids.started(pid)
  if not now then return true end
  local was = (core.fs.read_file(dir .. "/owner") or ""):match("started=(%d+)")
  return was ~= nil and was ~= now
end

-- The directories of servers that are gone, in the base this server uses: only our own name,
-- only real directories of our uid (find -type d does not follow a symlink; remove_tree never
-- does). Each recorded device is handed to opts.adopt (which records it as ours first: a kill
-- of this server meanwhile loses nothing), then the dead server's record is dropped; the
-- directory goes when nothing is mounted under it. Never a number that is not recorded.
function M.sweep(opts)
  local base = opts.base or M.base()
  local out = { dirs = 0, devices = 0, mounted = 0 }
  local r = run.tool{ argv = { "find", base, "-mindepth", "1", "-maxdepth", "1", "-type", "d",
      "-name", "switchboard-walls-*", "-uid", tostring(opts.euid), "-printf", "%f\n" },
    env = { PATH = opts.path }, deadline_ms = opts.deadline_ms }
  if not r or r.exit ~= 0 then return out end -- find said why on its stderr; nothing is touched
  for name in (r.stdout or ""):gmatch("[^\n]+") do
    local pid = tonumber(name:match(NAME_PATTERN))
    local dir = base .. "/" .. name
    if pid and pid ~= opts.pid and gone(dir, pid) then
      for _, n in ipairs(numbers(dir .. "/loops")) do
        opts.adopt(n)
        os.remove(dir .. "/loops/" .. n)
        out.devices = out.devices + 1
      end
      if mounted_under(dir) then
        out.mounted = out.mounted + 1
      elseif core.fs.remove_tree(dir) then
        out.dirs = out.dirs + 1
      end
    end
  end
  return out
end

return M
