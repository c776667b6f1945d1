-- The host's registry of walled servers' instance uids (docs/isolation.md "Many servers on one
-- host"): two walled servers on one host (two sandboxd, a sandboxd and a resident, a walled
-- bot's local executor) must never give instances the same host uid, or a command in one reads
-- the other's workspaces. Each server claims a block of uids in a file of its own under the
-- registry directory (root's, under /run: gone at reboot with the servers) and drops it at
-- close; a claim whose process is gone (kill -9) is stale and removed by the next reader.
--
--   local claim, err = uids.claim{ base, count, blocks, owner = {kind, root, listen} }
--     err: core.error kind "walls", code "uids" (the registry cannot be kept, or the block is taken)
--     claim.base, claim.count     the block this server's instances take uids from
--     claim:roots()              every other live server's --root (for the instances' hide list;
--                                read again only when the registry changed: Claim:roots below)
--     claim:release()
--   local pids = uids.live_pids(dir?)   set of the pids that hold a live claim (ours too)
--   uids.started(pid) → text | nil      its start time (clock ticks since boot), which a reused
--                                       pid does not share; nil when no such process
--
-- The block is the first of `blocks` consecutive ones from `base` (each `count` uids) that no
-- live claim overlaps. Written first, then checked (no lock: two servers starting at once both
-- see each other, and the later one — by start time, then pid — moves on). When every block
-- overlaps, the server refuses to start, naming the servers in the way.
local core = require("switchboard.core")

local function refused(message) return core.error("walls", message, { code = "uids" }) end

local M = {}

M.DIR = "/run/switchboard/walls"

-- A file's text, or nil.
local function read(path) return (core.fs.read_file(path)) end

-- A process's start time (clock ticks since boot), which a reused pid does not share.
local function started(pid)
  local stat = read("/proc/" .. pid .. "/stat")
  if not stat then return nil end
  local after = stat:match("%) (.*)$") -- the command may hold spaces and parentheses
  local fields = {}
  for w in (after or ""):gmatch("%S+") do fields[#fields + 1] = w end
  return fields[20] -- field 22 of the line; the 3rd is the first after ") "
end
M.started = started -- (shell/walls_dir.lua tells a dead server's directory the same way)

local function parse(text)
  local t = {}
  for k, v in (text or ""):gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  t.pid, t.base, t.count = tonumber(t.pid), tonumber(t.base), tonumber(t.count)
  if not (t.pid and t.base and t.count and t.started) then return nil end
  return t
end

-- Live claims other than ours (stale ones removed on the way). One process may hold several
-- (a test, or doctor beside a walled executor): each claim file is its own.
local function others(dir, own_path)
  local out = {}
  for _, name in ipairs(core.fs.list(dir) or {}) do
    if type(name) == "table" then name = name.name end
    local path = dir .. "/" .. name
    local c = type(name) == "string" and name:match("^%d+%-%d+%.claim$") and parse(read(path))
    if c and path ~= own_path then
      c.n = tonumber(name:match("^%d+%-(%d+)"))
      if started(c.pid) == c.started then out[#out + 1] = c else os.remove(path) end
    end
  end
  return out
end

local function overlaps(c, base, count) return c.base < base + count and base < c.base + c.count end

local function describe(c)
  return ("%s pid %d (root %s, listen %s) holds uids %d-%d"):format(c.kind or "a server", c.pid,
    c.root or "?", c.listen or "?", c.base, c.base + c.count - 1)
end

-- Whether `c` (another live claim) keeps its block against ours: the earlier started wins.
local function earlier(c, me)
  local a, b = tonumber(c.started) or 0, tonumber(me.started) or 0
  if a ~= b then return a < b end
  if c.pid ~= me.pid then return c.pid < me.pid end
  return (c.n or 0) < me.n
end

local serial = 0 -- claims made by this process

local Claim = {}
Claim.__index = Claim

-- The registry directory's mtime (ms), stat'ed through a handle on its parent held for the
-- claim's life (the directory itself may be made anew: its parent's entry is looked up each time).
local function registry_mtime(self)
  if not self.parent_handle then
    local parent, name = self.dir:match("^(.*)/([^/]+)$")
    self.parent_handle = parent and core.fs.root(parent ~= "" and parent or "/") or false
    self.dir_name = name
  end
  local st = self.parent_handle and self.parent_handle:stat(self.dir_name)
  return st and st.type == "dir" and st.mtime_ms or nil
end

-- The --root of every other live walled server on the host (the caller adds its own): never in
-- an instance's view. Asked at every instance start, so the registry is read again only when
-- its directory changed (a claim written or removed sets its mtime): one stat per start instead
-- of a listing and two reads per server (issue 43 item 4). A server that joined or left is seen
-- by the first start after its claim file was written or removed. An mtime less than
-- SETTLED_MS old is never trusted (a change in the same tick of the file system's clock would
-- leave it as it was): starts then read the registry. A server killed with -9 leaves its file,
-- and its root stays in the list until the registry next changes (hiding a path is the safe
-- side: its workspaces may still be there; a root no longer there is skipped by the helper).
local SETTLED_MS = 1000

function Claim:roots()
  local before_s = os.time() -- taken before the stat: a change after it gets a later mtime
  local mtime = registry_mtime(self)
  local cached = self.cached_roots
  if cached and mtime and cached.mtime == mtime and cached.settled then return cached.list end
  local out = {}
  for _, c in ipairs(others(self.dir, self.path)) do
    if c.root and c.root:sub(1, 1) == "/" then out[#out + 1] = c.root end
  end
  self.cached_roots = mtime and { mtime = mtime, list = out, settled = before_s * 1000 - mtime >= SETTLED_MS } or nil
  return out
end

function Claim:release()
  if self.path then os.remove(self.path) end
  self.path = nil
  if self.parent_handle then self.parent_handle:close() end
  self.parent_handle, self.cached_roots = nil, nil
end

-- The pids of every live claim (ours too): a walled server claims before it makes its cgroups
-- and releases after it has removed them, so a cgroup tree named by a pid outside this set is
-- a dead server's — whatever process holds that pid now (shell/instance.lua's sweep).
function M.live_pids(dir)
  local pids = {}
  for _, c in ipairs(others(dir or M.DIR, nil)) do pids[c.pid] = true end
  return pids
end

function M.claim(opts)
  local dir = opts.dir or M.DIR
  local parent = dir:match("^(.+)/[^/]+$")
  if parent then core.fs.mkdir_p(parent, tonumber("755", 8)) end
  local ok, err = core.fs.mkdir_p(dir, tonumber("755", 8))
  if not ok then
    return nil, refused(("cannot keep the host's registry of instance uids in %s: %s"):format(dir, tostring(err and err.message)))
  end
  local pid = opts.pid or tonumber((read("/proc/self/stat") or ""):match("^(%d+)"))
  local owner = opts.owner or {}
  serial = serial + 1
  local me = { pid = pid, n = serial, started = started(pid) }
  local path = ("%s/%d-%d.claim"):format(dir, pid, serial)
  local blocks = math.max(1, opts.blocks or 1)
  for k = 0, blocks - 1 do
    local base = opts.base + k * opts.count
    local taken = false
    for _, c in ipairs(others(dir, path)) do
      if overlaps(c, base, opts.count) then taken = true end
    end
    if not taken then
      me.base, me.count = base, opts.count
      local text = ("pid=%d\nstarted=%s\nbase=%d\ncount=%d\nkind=%s\nroot=%s\nlisten=%s\n"):format(pid,
        me.started, base, opts.count, tostring(owner.kind or "?"), tostring(owner.root or "?"),
        tostring(owner.listen or "?"))
      local wok, werr = core.fs.write_file(path, text)
      if not wok then
        return nil, refused(("cannot write %s: %s"):format(path, tostring(werr and werr.message)))
      end
      -- written, then checked again: of two servers that claimed at once, the later moves on
      local lost = false
      for _, c in ipairs(others(dir, path)) do
        if overlaps(c, base, opts.count) and earlier(c, me) then lost = true end
      end
      if not lost then return setmetatable({ base = base, count = opts.count, path = path, dir = dir }, Claim) end
      os.remove(path)
    end
  end
  local inway = {}
  for _, c in ipairs(others(dir, path)) do
    for k = 0, blocks - 1 do
      if overlaps(c, opts.base + k * opts.count, opts.count) then inway[#inway + 1] = describe(c); break end
    end
  end
  return nil, refused(("the instance uids of policies/isolation.lua (uid_base %d, uid_count %d, uid_blocks %d: uids %d-%d) "
    .. "are taken by another walled server on this host — %s; two servers must never share instance uids "
    .. "(a command in one would reach the other's workspaces): give this one another uid_base (docs/isolation.md)")
    :format(opts.base, opts.count, blocks, opts.base, opts.base + blocks * opts.count - 1,
      table.concat(inway, "; ")))
end

return M
