-- Scratch files and directories for specs, all under one directory of this process's own:
-- $TMPDIR/sb.XXXXXX (scripts/test gives the run a private TMPDIR; else /tmp), made with mktemp(1)
-- on first use and removed with everything in it when busted ends (helper.lua); its .spec file
-- names the spec, so a root left behind says whose. The names are short on purpose: Lua cuts a
-- chunk's name in its messages to 59 bytes ("...tail"), and specs read a policy file's whole path
-- in them ($TMPDIR/sb.XXXXXX/policies-N/execution.lua fits with scripts/test's TMPDIR).
-- Never os.tmpname(): its template is hard-wired to /tmp/lua_XXXXXX (TMPDIR ignored) and the
-- names it makes are nobody's to remove.
--   M.dir(prefix)   a fresh directory (mode 0700), removed by remove_all() or at the end
--   M.scratch(prefix)  the same, left out of remove_all() (the other support helpers' own: a
--                      spec's remove_all() in after_each must not take a describe's policy dir)
--   M.name(prefix)  a fresh path, not made (a file or directory the caller makes)
--   M.remove(path)  rm -rf that refuses a path with a mount point at or below it
local M = {}

local root
local made = {}
local count = 0
-- A process that is not busted (a bench script, a child lua5.4 on the support helpers) has no
-- exit hook: the root goes when its Lua state closes (a finalizer, run by lua_close at the end)
local at_close

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The directory every name below is made in.
function M.root()
  if root then return root end
  local base = os.getenv("TMPDIR")
  if not base or base == "" then base = "/tmp" end
  -- 0711: like /tmp, another uid (a walled instance's) passes through to what a spec opens to
  -- it below (walls_spawn_spec's bwrap wrapper on its PATH) but lists nothing
  local p = assert(io.popen("d=$(mktemp -d " .. quote(base .. "/sb.XXXXXX") .. ") && chmod 0711 \"$d\" && echo \"$d\""))
  root = p:read("l")
  p:close()
  assert(root and root ~= "", "mktemp -d under " .. base .. " failed")
  -- the spec busted runs (its last argument *_spec.lua) or the script, for scripts/test's report
  local spec = arg and arg[0] or "lua"
  for _, a in ipairs(arg or {}) do spec = a:match("[^/]*_spec%.lua$") and a or spec end
  at_close = setmetatable({}, { __gc = function() M.remove_root() end })
  local f = io.open(root .. "/.spec", "w")
  if f then f:write(spec, "\n"); f:close() end
  return root
end

function M.name(prefix)
  count = count + 1
  return ("%s/%s-%d"):format(M.root(), (prefix or "f"):gsub("[^%w._-]", "_"), count)
end

function M.scratch(prefix)
  local path = M.name(prefix or "d")
  assert(os.execute("mkdir -m 700 " .. quote(path)), "mkdir " .. path)
  return path
end

function M.dir(prefix)
  local path = M.scratch(prefix)
  made[#made + 1] = path
  return path
end

-- The mount points at or below path (/proc/self/mountinfo's fifth field, octal escapes read).
function M.mounts_under(path)
  local out = {}
  local f = io.open("/proc/self/mountinfo")
  if not f then return out end
  path = path:gsub("/+$", "")
  for line in f:lines() do
    local at = line:match("^%S+ %S+ %S+ %S+ (%S+)")
    if at then
      at = at:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end)
      if at == path or at:sub(1, #path + 1) == path .. "/" then out[#out + 1] = at end
    end
  end
  f:close()
  return out
end

-- rm -rf path, refused (false, why) when a mount point is at or below it: a walled server's
-- instance may hold one while it lives, and removing through it would empty what it mounts.
-- --one-file-system besides: a mount made between the check and the removal is left alone.
function M.remove(path)
  if not path or path == "" or path == "/" then return false, "no path" end
  local held = M.mounts_under(path)
  if #held > 0 then return false, "mount points under " .. path .. ": " .. table.concat(held, " ") end
  local ok = os.execute("rm -rf --one-file-system " .. quote(path))
  return ok == true or ok == 0, ok and nil or ("rm -rf " .. path .. " failed")
end

-- Removes every directory dir() made (an after_each's call; the root's removal catches the rest).
function M.remove_all()
  for i = #made, 1, -1 do
    M.remove(made[i])
    made[i] = nil
  end
end

-- Removes the root and all in it; true when there was none. helper.lua calls it when busted ends,
-- after the servers the spec left are gone.
function M.remove_root()
  if not root then return true end
  local ok, why = M.remove(root)
  if ok then root = nil end
  made = {}
  return ok, why
end

return M
