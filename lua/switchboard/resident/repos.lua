-- The resident's repositories (docs/resident.md): each onboarded repository has one warm
-- checkout under root/repos/<owner>/<name>/checkout, cloned once from the git base URL, its
-- install command run once (policies/execution.lua resident.install), and fetched on the
-- schedule timeouts.resident.fetch_every_ms. A repository's state is one of
--   onboarding   the clone or the install is running
--   warm         threads may attach
--   cold         onboarded, but not verified since this process started (the first fetch after
--                timeouts.resident.warm_after_start_ms makes it warm)
--   degraded     with a reason: the install failed, a fetch failed, the disk is full
-- and a repository never onboarded is absent (the route answers 404).
--
--   local repos = repos.open{root, git_base, policy (fn → snap), log}
--   repos:get(name) → entry {name, state, reason, checkout, install} | nil
--   repos:onboard(name) → entry (the work continues in a task) | nil, err
--
-- Failures are core.error values: kind "invalid" (a repository name the resident refuses),
-- "host_tool" (git, df, chmod, cp: code "spawn" | "timeout" | "exit") and "install" (the
-- repository's install command). A degraded entry's reason is such an error's message.
--   repos:start() / repos:close()    the fetch schedule
--
-- git and the install run as children of the engine with argv only (no shell for git); the
-- install command is the repository's own shell text and goes through shell/run.lua.
local core = require("switchboard.core")
local run = require("switchboard.shell.run")
local child_env = require("switchboard.shell.child_env")

local M = {}

local Repos = {}
Repos.__index = Repos

local MARKER = "onboarded.json"
local NAME = "^[%w_.-]+/[%w_.-]+$"

-- OWNER/NAME as a repository name the resident accepts, or nil, err (kind invalid).
function M.check_name(name)
  if type(name) ~= "string" or not name:find(NAME) or name:find("%.%.") or name:find("^%.")
      or name:find("/%.") or #name > 200 then
    return nil, core.error("invalid", "repo must be OWNER/NAME (letters, digits, '-', '_' and '.'), like acme/api")
  end
  return name
end

local function first_line(s)
  s = tostring(s or ""):gsub("^%s+", "")
  return (s:match("^[^\n]*"))
end

local function nolog() end

function M.open(opts)
  assert(type(opts.root) == "string", "repos.open: root is required")
  assert(type(opts.git_base) == "string", "repos.open: git_base is required")
  return setmetatable({
    root = opts.root, git_base = opts.git_base:gsub("/*$", "/"), policy = opts.policy,
    log = opts.log or nolog, entries = {}, stop = core.signal(), getenv = opts.getenv or os.getenv,
  }, Repos)
end

local function tool_env(self)
  local env = { PATH = self.getenv("PATH"), HOME = self.getenv("HOME") or "/tmp",
    GIT_TERMINAL_PROMPT = "0", LANG = "C.UTF-8" }
  return env
end

local function tool_failed(code, message, cause)
  return core.error("host_tool", message, { code = code, cause = cause })
end

-- One git (or other tool) run with argv: → true, result | nil, err (kind host_tool)
local function tool(self, argv, cwd, deadline_ms)
  local r, err = run.tool{ argv = argv, cwd = cwd, env = tool_env(self), deadline_ms = deadline_ms,
    kill_grace_ms = 2000, max_output = 64 * 1024, signal = self.stop }
  if not r then return nil, tool_failed("spawn", first_line(err and err.message or err), err) end
  if r.exit == 0 then return true, r end
  if r.timed_out then
    return nil, tool_failed("timeout", ("%s timed out after %ds"):format(
      argv[1] == "git" and ("git " .. argv[2]) or argv[1], deadline_ms // 1000))
  end
  local why = first_line(r.stderr ~= "" and r.stderr or r.stdout)
  return nil, tool_failed("exit", ("%s exited %s%s"):format(
    argv[1] == "git" and ("git " .. (argv[2] == "-C" and argv[4] or argv[2])) or argv[1],
    tostring(r.exit), why ~= "" and (": " .. why) or ""))
end
M.tool = tool

function Repos:dir(name) return self.root .. "/repos/" .. name end
function Repos:get(name) return self.entries[name] end

local function set(self, e, state, reason)
  local was = e.state
  e.state, e.reason, e.since_ms = state, reason, core.now_ms()
  if was ~= state then
    self.log(state == "degraded" and "warn" or "info", "resident.repo_state",
      { repo = e.name, state = state, reason = reason })
  end
end

-- The first install row whose file the checkout has, or nil (nothing to install).
local function detect(snap, checkout)
  for _, row in ipairs(snap.execution.resident.install) do
    if core.fs.exists(checkout .. "/" .. row.file) then return row end
  end
  return nil
end
M.detect = detect

-- Free space under root in MiB (df -Pk), or nil when it cannot be read.
local function free_mb(self)
  local ok, r = tool(self, { "df", "-Pk", self.root }, nil, self.policy().timeouts.resident.tool_timeout_ms)
  if not ok then return nil end
  local avail = r.stdout:match("\n%S+%s+%d+%s+%d+%s+(%d+)")
  return avail and tonumber(avail) // 1024 or nil
end

-- warm, or degraded (disk full) when less than min_free_mb is left.
local function settle(self, e, snap)
  local free = free_mb(self)
  local min = snap.timeouts.resident.min_free_mb
  if free and free < min then
    self.log("warn", "resident.disk_full", { repo = e.name, free_mb = free, min_free_mb = min })
    return set(self, e, "degraded", "disk full")
  end
  set(self, e, "warm")
end

local function install(self, e, snap)
  local row = detect(snap, e.checkout)
  e.install = row
  e.lock = nil
  if not row then return true end
  local base = child_env.base(snap, self.getenv)
  local r, err = run.bash{ command = row.command, cwd = e.checkout, env = base,
    deadline_ms = snap.timeouts.resident.install_timeout_ms, kill_grace_ms = snap.timeouts.bash.kill_grace_ms,
    max_output = 256 * 1024, signal = self.stop }
  if not r then
    return nil, core.error("install", "install could not start: " .. first_line(err and err.message or err), { cause = err })
  end
  if r.timed_out then return nil, core.error("install", ("install (%s) timed out"):format(row.command)) end
  if r.exit ~= 0 then
    local why = first_line(r.stderr ~= "" and r.stderr or r.stdout)
    return nil, core.error("install", ("install failed: `%s` exited %s%s"):format(row.command, tostring(r.exit),
      why ~= "" and (": " .. why) or ""))
  end
  return true
end

-- What the install depends on at the checkout's HEAD: the row's file and its blob id ("" when
-- no row matches). A change after a fetch means the install runs again.
local function lock_of(self, e, snap)
  local row = detect(snap, e.checkout)
  if not row then return "" end
  local ok, r = tool(self, { "git", "-C", e.checkout, "rev-parse", "--verify", "--quiet", "HEAD:" .. row.file }, nil,
    snap.timeouts.resident.tool_timeout_ms)
  return row.file .. "@" .. (ok and r.stdout:match("%x+") or "untracked")
end
M.lock_of = lock_of

-- The way from the root to the checkout's objects, traversable (not listable) by every uid:
-- bwrap, as a thread's instance uid, resolves the objects directory it binds read-only into
-- the instance (routes.lua); the threads root is 0711 for the same reason.
local function open_way(self, e)
  local dirs, d = { self.root .. "/repos" }, self.root .. "/repos"
  for part in e.name:gmatch("[^/]+") do d = d .. "/" .. part; dirs[#dirs + 1] = d end
  dirs[#dirs + 1] = e.checkout
  dirs[#dirs + 1] = e.checkout .. "/.git"
  local argv = { "chmod", "0711", "--" }
  for _, x in ipairs(dirs) do argv[#argv + 1] = x end
  return tool(self, argv, nil, self.policy().timeouts.resident.tool_timeout_ms)
end

local function onboard_task(self, e)
  local snap = self.policy()
  local t = snap.timeouts.resident
  local parent = self:dir(e.name)
  core.fs.remove_tree(parent)
  local ok, why = core.fs.mkdir_p(parent, tonumber("700", 8))
  e.onboard_failed = true -- until the end: a failed onboarding is not fetched, only redone
  if not ok then return set(self, e, "degraded", "cannot create the checkout: " .. tostring(why and why.message)) end
  ok, why = tool(self, { "git", "clone", "--quiet", "--", e.upstream, e.checkout }, nil, t.clone_timeout_ms)
  if not ok then return set(self, e, "degraded", "clone failed: " .. why.message) end
  -- Threads borrow these objects (alternates): a gc here must never drop one a thread's
  -- commits may still reach (an upstream force-push leaves its old commits unreachable here).
  tool(self, { "git", "-C", e.checkout, "config", "gc.pruneExpire", "never" }, nil, t.tool_timeout_ms)
  ok, why = open_way(self, e)
  if not ok then return set(self, e, "degraded", "cannot open the checkout's objects to threads: " .. why.message) end
  ok, why = install(self, e, snap)
  if not ok then return set(self, e, "degraded", why.message) end
  e.onboard_failed = nil
  core.fs.write_file(parent .. "/" .. MARKER, '{"repo":"' .. e.name .. '"}')
  settle(self, e, snap)
end

function Repos:onboard(name)
  local ok, why = M.check_name(name)
  if not ok then return nil, why end
  local e = self.entries[name]
  if e and (e.state == "onboarding" or e.state == "warm" or e.state == "cold") then return e end
  e = e or { name = name, checkout = self:dir(name) .. "/checkout", upstream = self.git_base .. name }
  self.entries[name] = e
  set(self, e, "onboarding")
  core.go(onboard_task, self, e)
  return e
end

-- One scheduled refresh of an onboarded repository: fetch, move the checkout's tree to
-- origin/HEAD (the commit threads attach at by default, so the dependencies copied into them
-- match it), re-run the install when that changed its file (or the last install failed),
-- settle. While the install runs the state is onboarding (threads fall back); a failed
-- re-install is degraded with its reason and is tried again at the next refresh. Onboarding
-- repositories are left alone; a failed onboarding stays degraded until onboarded again.
function Repos:refresh(e)
  if e.state == "onboarding" or e.onboard_failed then return end
  local snap = self.policy()
  local limit = snap.timeouts.resident.clone_timeout_ms
  local ok, why = tool(self, { "git", "-C", e.checkout, "fetch", "--quiet", "--prune", "origin" }, nil, limit)
  if not ok then return set(self, e, "degraded", "fetch failed: " .. why.message) end
  e.lock = e.lock or lock_of(self, e, snap)
  ok, why = tool(self, { "git", "-C", e.checkout, "reset", "--quiet", "--hard", "origin/HEAD" }, nil, limit)
  if not ok then return set(self, e, "degraded", "fetch failed: " .. why.message) end
  local lock = lock_of(self, e, snap)
  if lock ~= e.lock or e.install_failed then
    set(self, e, "onboarding", e.install_failed and "install: trying again" or
      ("install: %s changed"):format(lock:match("^[^@]*") ~= "" and lock:match("^[^@]*") or "the install file"))
    ok, why = install(self, e, snap)
    e.install_failed = not ok or nil
    if not ok then return set(self, e, "degraded", why.message) end
  end
  e.lock = lock
  settle(self, e, snap)
end

-- Checkouts a previous process onboarded: cold until the first scheduled fetch.
local function adopt(self)
  for _, owner in ipairs(core.fs.list(self.root .. "/repos") or {}) do
    for _, repo in ipairs(core.fs.list(self.root .. "/repos/" .. owner) or {}) do
      local name = owner .. "/" .. repo
      if M.check_name(name) and core.fs.exists(self:dir(name) .. "/" .. MARKER) then
        local e = { name = name, checkout = self:dir(name) .. "/checkout", upstream = self.git_base .. name }
        e.install = detect(self.policy(), e.checkout)
        open_way(self, e)
        self.entries[name] = e
        set(self, e, "cold", "not fetched since the resident started")
      end
    end
  end
end

local function schedule(self)
  local first = true
  while not self.stop.aborted do
    local t = self.policy().timeouts.resident
    if not core.sleep(first and t.warm_after_start_ms or t.fetch_every_ms, self.stop) then return end
    first = false
    local names = {}
    for name in pairs(self.entries) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      if self.stop.aborted then return end
      self:refresh(self.entries[name])
    end
  end
end

function Repos:start()
  core.fs.mkdir_p(self.root .. "/repos", tonumber("700", 8))
  adopt(self)
  core.go(schedule, self)
end

function Repos:close() self.stop:abort("closed") end

return M
