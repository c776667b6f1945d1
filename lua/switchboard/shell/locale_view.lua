-- The locales an instance sees (issue 43, the command's own CPU): a copy of the host's
-- /usr/lib/locale with a locale archive, shown read-only at /usr/lib/locale in every instance
-- (switchboard-walls hold --locale; src/walls/bwrap.c).
--
-- Why: on a host whose /usr/lib/locale has locale directories but no locale-archive (Debian's
-- libc-bin ships C.utf8 as a directory; only the `locales` packages make an archive), every
-- process that calls setlocale with LANG set — every bash — opens, maps and closes each
-- category's file of that locale one by one: ~60 system calls and ~16 page faults more per
-- process, ~120 us of CPU per `bash -c true` here (bench/README.md "The command's own CPU").
-- With the same locales in one archive glibc maps one file. The locales are the host's own, the
-- directory is read-only inside, and nothing else of the view changes.
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

M.HOST = "/usr/lib/locale"
-- In the server's root (a dot name is never a thread's workspace), one per walls host: its
-- process's pid and a random tag, so two processes on one root (local executors) never remove
-- or rebuild each other's while their instances start.
M.NAME = ".locale-view-%d-%s"
M.PATTERN = "^%.locale%-view%-(%d+)%-%x+$"

local function tool(argv, deadline_ms)
  local r = run.tool{ argv = argv, deadline_ms = deadline_ms,
    env = { PATH = os.getenv("PATH") or "/usr/bin:/bin" } }
  if not r or r.exit ~= 0 then
    return nil, core.error("workspace", ("%s failed (exit %s): %s"):format(argv[1], tostring(r and r.exit),
      ((r and r.stderr) or ""):sub(1, 200)))
  end
  return true
end

-- The host's locales that are directories (each with its LC_CTYPE), sorted (as core.fs.list).
function M.host_locales(host)
  local out = {}
  for _, name in ipairs(core.fs.list(host or M.HOST) or {}) do
    if name:sub(1, 1) ~= "." and core.fs.exists(("%s/%s/LC_CTYPE"):format(host or M.HOST, name)) then
      out[#out + 1] = name
    end
  end
  return out
end

-- The copies of processes that are gone (killed before their close): removed.
local function sweep(root, pid)
  for _, name in ipairs(core.fs.list(root) or {}) do
    local owner = tonumber(name:match(M.PATTERN))
    if owner and owner ~= pid and not core.fs.exists("/proc/" .. owner) then
      core.fs.remove_tree(root .. "/" .. name)
    end
  end
end

-- Makes this host's copy (pid: the walls host's process) from the host's locales of now and
-- returns it as {top =, dir = the directory to show at /usr/lib/locale}, or nil and why the
-- host's own is shown as it is: it has an archive already, it has no locale directory, or the
-- copy failed.
function M.prepare(root, pid, deadline_ms)
  sweep(root, pid)
  if core.fs.exists(M.HOST .. "/locale-archive") then return nil, core.error("workspace", "the host has a locale archive") end
  local names = M.host_locales()
  if #names == 0 then return nil, core.error("workspace", "the host has no locale directory") end
  local top = ("%s/" .. M.NAME):format(root, pid, core.crypto.hex(core.crypto.random_bytes(4)))
  local dir = top .. M.HOST
  local ok, err = core.fs.mkdir_p(dir, tonumber("755", 8))
  if not ok then return nil, core.error("workspace", "cannot create " .. dir .. ": " .. tostring(err and err.message)) end
  local argv = { "localedef", "--prefix=" .. top, "--add-to-archive" }
  for _, name in ipairs(names) do argv[#argv + 1] = M.HOST .. "/" .. name end
  -- the directories too, so that what lists or reads them finds what the host has; then every
  -- level readable by the instances' uids (the server's umask may be 0077)
  local steps = {
    { "cp", "-a", M.HOST .. "/.", dir .. "/" },
    argv,
    { "chmod", "-R", "a+rX,go-w", top },
  }
  for _, step in ipairs(steps) do
    local done, why = tool(step, deadline_ms)
    if not done then
      core.fs.remove_tree(top)
      return nil, why
    end
  end
  return { top = top, dir = dir }
end

function M.remove(view) core.fs.remove_tree(view.top) end

return M
