-- How one sandboxd instance runs commands and touches files: in the thread's workspace
-- (shell/workspace.lua: root/<dir_name(thread key)>, commands through shell/run.lua's one spawn
-- point, files through the confined core.fs.root) — the same implementation the local executor
-- uses. The fleet (fleet.lua) decides WHEN an instance exists; this decides HOW it runs and
-- how it goes to sleep. Walled or not is the workspace's business (opts.walls: namespaces, a
-- cgroup), behind the same four methods:
--
--   runner:exec{command, env, deadline_ms, kill_grace_ms, max_output, signal} → proc result | nil, err
--   runner:read(path, max_bytes)  → bytes | nil, err (kind escape | not_found | not_a_file | too_large | io)
--   runner:write(path, bytes)     → true | nil, err
--   runner:stop(reason)           → kill what still runs, delete the workspace (sleep; reason
--                                   "idle" | "shutdown")
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local run = require("switchboard.shell.run")
local workspace = require("switchboard.shell.workspace")

local M = {}

local Runner = {}
Runner.__index = Runner

-- opts.walls: the host's walls (shell/instance.lua) this instance is built with, if any;
-- opts.network: its network ("host" | "none"; nil = policies/isolation.lua network);
-- opts.existing: the directory is this runner's own already (the resident's worktree, made by
-- /attach), not an earlier instance's leftovers to clear — its files outlive the instance;
-- opts.ro_binds: host directories the instance shows read-only; opts.log: for the walls' events;
-- opts.keep: the workspace is the thread's own and outlives the instance (sandboxd --pod: the
-- pod's volume is the thread's, kept across the pod's sleep by whoever claimed it — issue 37):
-- found there, it is used, and a stop ends the processes but leaves the files.
function M.new(root, thread_key, opts)
  opts = opts or {}
  local label = M.label(thread_key)
  local ws = workspace.open(root, thread_key, { walls = opts.walls, network = opts.network,
    existing = opts.existing or opts.keep, ro_binds = opts.ro_binds, label = label, log = opts.log })
  return setmetatable({
    root = root,
    key = thread_key,
    dir = ws.dir,
    ws = ws,
    label = label,
    checked = (opts.existing or opts.keep) or nil,
    keep = opts.keep or nil,
  }, Runner)
end

-- How logs and errors name a thread: a hash of its key, never the key (or a path) itself.
function M.label(thread_key)
  return "t-" .. core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 12)
end

-- new_runner for fleet.new
-- walls: the host's walls (shell/instance.lua), or nil for unwalled instances (--no-walls);
-- log: the server's (core.log's shape).
-- want: the fleet's {network} for the instance being woken (routes check it first: without
-- walls only "host" gets here).
function M.factory(root, walls, log, keep)
  return function(thread_key, want)
    return M.new(root, thread_key, { walls = walls, network = want and want.network, log = log, keep = keep })
  end
end

-- An error's reason without the host path it names ("…: mkdir_p \"/srv/…\": Read-only file
-- system" → "Read-only file system"): errors go to the client, paths of the host do not.
local function reason_of(err)
  local msg = tostring(type(err) == "table" and err.message or err)
  return msg:match(":%s*([^:]+)$") or "an I/O error"
end

-- The workspace's own failures (it could not be made, cleared or opened) name the thread. The
-- host's disk being full is said in the helper's own words, whole: they name no path, only
-- amounts and the policy settings (shell/instance.lua HOST_DISK_FULL).
local function scrub(self, a, err)
  if a == nil and type(err) == "table" and err.kind == "workspace" and err.code == "host-disk-full" then
    return nil, err
  end
  if a == nil and type(err) == "table" and err.kind == "workspace" then
    return nil, core.error("workspace", ("the workspace of thread %s could not be used (%s)")
      :format(self.label, reason_of(err)))
  end
  return a, err
end

-- A new instance never starts on data of an old one: a directory already there before its
-- first operation is what a sleep failed to remove (the fleet logged that), and it is removed
-- now — the second try — or nothing runs.
local function fresh(self)
  if self.checked then return true end
  if core.fs.exists(self.dir) then
    local ok, err = core.fs.remove_tree(self.dir)
    if not ok and core.fs.exists(self.dir) then
      return nil, core.error("workspace", ("the workspace of thread %s still holds an earlier "
        .. "instance's files and could not be cleared (%s); nothing ran"):format(self.label, reason_of(err)))
    end
  end
  self.checked = true
  return true
end

function Runner:exec(spec)
  local ok, err = fresh(self)
  if not ok then return nil, err end
  return scrub(self, self.ws:run(spec))
end

function Runner:read(path, max_bytes)
  local ok, err = fresh(self)
  if not ok then return nil, err end
  return scrub(self, self.ws:read(path, max_bytes))
end

function Runner:write(path, bytes)
  local ok, err = fresh(self)
  if not ok then return nil, err end
  return scrub(self, self.ws:write(path, bytes))
end

-- The workspace ready (walled: its instance made and started, its files the instance's):
-- the resident's /attach, before the thread's first command. opts.remade: the files were made
-- anew by the server (walled: they are handed to the instance again).
function Runner:ensure(opts)
  local ok, err = fresh(self)
  if not ok then return nil, err end
  if opts and opts.remade then self.ws:files_remade() end
  return scrub(self, self.ws:ensure())
end

local TRASH = ".trash-"

local function remove_now(dir)
  local ok, err = core.fs.remove_tree(dir)
  if not ok and core.fs.exists(dir) then
    error("the workspace could not be removed: " .. reason_of(err), 0)
  end
end

-- Sleep: kill what still runs and delete the workspace. The workspace leaves its path first,
-- before anything here yields: the fleet forgets this instance as it calls stop, so the thread's
-- next request may wake a new one at once, and while this one's processes are being killed
-- (seconds: the holder's exit, the cgroups' reap) the new one must find nothing of this one's
-- at its path — before, the new instance's directory was made there and this stop then moved
-- it away and deleted it under the new instance ("walls: chdir /workspace: Permission denied"
-- under load). Deleting a large tree (a node_modules has 10⁵ files) takes seconds, and the loop
-- must not stall for it — every heartbeat and every accept would wait — so the renamed
-- workspace is removed by an `rm -rf` child. On shutdown (reason "shutdown") it is removed
-- before returning; a trash directory an exit interrupted is removed by the next start's sweep.
function Runner:stop(reason)
  if self.keep then return self.ws:stop("instance asleep") end -- the files stay (opts.keep)
  local trash
  if core.fs.exists(self.dir) then
    trash = ("%s/%s%s-%s"):format(self.root, TRASH, workspace.dir_name(self.key),
      core.crypto.hex(core.crypto.random_bytes(4)))
    if not os.rename(self.dir, trash) then trash = nil end
  end
  self.ws:stop("instance asleep")
  if trash == nil then
    if core.fs.exists(self.dir) then remove_now(self.dir) end -- it could not be renamed
    return
  end
  if reason == "shutdown" then return remove_now(trash) end
  local deadline_ms = policy.current().timeouts.file_op.budget_ms
  core.go(function()
    local r = run.tool{ argv = { "rm", "-rf", "--", trash }, deadline_ms = deadline_ms }
    if (not r or r.exit ~= 0) and core.fs.exists(trash) then pcall(core.fs.remove_tree, trash) end
  end)
end

-- At start: workspaces left in root by a server that did not shut down cleanly belong to no
-- instance; they are removed like a slept instance's, and so is any trash a removal left. Only
-- names this module creates (<prefix>-<16 hex digits>, .trash-…) are touched, nothing else in
-- root. Returns the count removed.
function M.sweep(root)
  local names = core.fs.list(root)
  if not names then return 0 end
  local n = 0
  for _, name in ipairs(names) do
    if name:find("%-%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$") or name:sub(1, #TRASH) == TRASH then
      if core.fs.remove_tree(root .. "/" .. name) then n = n + 1 end
    end
  end
  return n
end

return M
