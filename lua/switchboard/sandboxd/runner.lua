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
--   runner:stop(reason)           → kill what still runs; the workspace is kept (sleep; reason
--                                   "idle" | "shutdown"; sandboxd/keep.lua), or removed ("detach":
--                                   the resident's thread left its worktree)
--   runner:take_note()            → what the thread is told once about its workspace: kept from
--                                   its sleep, expired (evicted by the budget), or copied from
--                                   its repository's base (sandboxd/bases.lua) | nil
--   runner.recover(root, log)     at start: what an earlier run kept or left (below)
--   runner.sweep_templates(root, snap, log, half_made?)   the image templates of sizes snap does
--                                 not use removed (at start, and after each policy reload)
-- exec's spec.base: the repository the command prepares (the agent's clone): a new workspace
-- starts as a copy of its base, or — no usable base — the command is told to leave a marker
-- (env SWITCHBOARD_BASE) and its workspace becomes the base after it.
local core = require("switchboard.core")
local bases = require("switchboard.sandboxd.bases")
local keep = require("switchboard.sandboxd.keep")
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
function M.new(root, thread_key, opts)
  opts = opts or {}
  local label = M.label(thread_key)
  local ws = workspace.open(root, thread_key, { walls = opts.walls, network = opts.network,
    existing = opts.existing, ro_binds = opts.ro_binds, label = label, log = opts.log })
  return setmetatable({
    root = root,
    key = thread_key,
    dir = ws.dir,
    ws = ws,
    label = label,
    checked = opts.existing or nil,
    after_sleep = opts.after_sleep,
    log = opts.log,
  }, Runner)
end

-- How logs and errors name a thread: a hash of its key, never the key (or a path) itself.
-- Every request's log line names its thread, so the labels of the keys seen lately are kept
-- (at most LABELS_KEPT; past that the cache starts again: keys come from anyone, before the
-- bearer is checked, and must not grow it).
local LABELS_KEPT = 1024
local labels, labels_n = {}, 0
function M.label(thread_key)
  local label = labels[thread_key]
  if label then return label end
  label = "t-" .. core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 12)
  if labels_n >= LABELS_KEPT then labels, labels_n = {}, 0 end
  labels[thread_key], labels_n = label, labels_n + 1
  return label
end

-- new_runner for fleet.new
-- walls: the host's walls (shell/instance.lua), or nil for unwalled instances (--no-walls);
-- log: the server's (core.log's shape).
-- want: the fleet's {network} for the instance being woken (routes check it first: without
-- walls only "host" gets here). after_sleep: called (in a task of its own) once an instance
-- has slept and its workspace is kept — the budget's turn (sandboxd/keep.lua enforce).
function M.factory(root, walls, log, after_sleep)
  return function(thread_key, want)
    return M.new(root, thread_key, { walls = walls, network = want and want.network, log = log,
      after_sleep = after_sleep })
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

-- Before the instance's first operation: a workspace already there is the thread's own, kept
-- from its last sleep (or from before sandboxd's restart; sandboxd/keep.lua): the new instance
-- mounts it (walled: never a spare renamed onto it; its files are handed to the new uid) and
-- the thread is told once. None there: a budget may have evicted it, and the thread is told
-- that instead (the tombstone's reason).
-- Anything else at the path (a symlink root or a bug put there) is never followed: it is
-- removed — the link itself, not its target — or nothing runs.
-- A new workspace on a repository: a copy of its base when one is usable (the thread is told
-- its commit and age), else the command that clones is asked to leave the marker the base is
-- made from (capture, after it).
local function from_base(self, repo, since)
  local snap = policy.current()
  local iso = snap.isolation
  local info = bases.info(self.root, repo)
  if info and since and info.made_s < since and not bases.stale(self.root, repo, info) then
    bases.mark_stale(self.root, repo) -- a push since it was made
  end
  local t0 = core.now_ms()
  if bases.usable(info, iso.bases_refresh_ms, bases.stale(self.root, repo, info)) then
    local got, err = bases.copy_into(self.root, repo, self.dir, snap.timeouts.file_op.budget_ms)
    if got then
      if self.log then
        self.log("info", "sandboxd.workspace_from_base", { instance = self.label, copy_ms = core.now_ms() - t0 })
      end
      local what = ("a snapshot of %s (%s), %s old: its setup already ran"):format(got.sha:sub(1, 12),
        got.branch, keep.age_text(math.max(0, os.time() - got.made_s) * 1000))
      -- a thread whose slept workspace expired is told so, and what it starts from instead
      local why = keep.expired(self.root, workspace.dir_name(self.key))
      self.note = why and { state = "expired", text = why .. ": started from " .. what }
        or { state = "snapshot", text = "workspace from " .. what }
      return
    end
    if self.log then self.log("warn", "sandboxd.base_not_copied", { instance = self.label, reason = err.message }) end
  end
  self.capture = repo
end

-- After the command that cloned into a new workspace: when it left the marker (the default
-- branch cloned, setup done), the workspace is copied as the repository's base — its instance
-- synced first — and the marker removed from the thread's own copy.
local function capture(self)
  local repo = self.capture
  self.capture = nil
  local marker = self.ws:read(bases.MARKER, 4096)
  local sha = marker and marker:match("^(%x+)")
  if not sha then return end
  local branch = marker:match("^%x+%s+(%S+)") or "HEAD"
  local snap = policy.current()
  local budget = snap.timeouts.file_op.budget_ms
  self.ws:run{ command = "sync", env = {}, deadline_ms = budget }
  local t0 = core.now_ms()
  local ok, err = bases.capture(self.root, repo, self.dir, { sha = sha, branch = branch }, budget)
  self.ws:run{ command = "rm -f " .. bases.MARKER, env = {}, deadline_ms = budget }
  if self.log then
    if ok then self.log("info", "sandboxd.base_prepared", { instance = self.label, copy_ms = core.now_ms() - t0 })
    else self.log("warn", "sandboxd.base_not_prepared", { instance = self.label, reason = err.message }) end
  end
end

local function fresh(self, repo, since)
  if self.checked then return true end
  if core.fs.exists(self.dir) and keep.kind(self.dir) ~= "directory" then
    local ok, err = core.fs.remove_tree(self.dir)
    if not ok and core.fs.exists(self.dir) then
      return nil, core.error("workspace", ("the workspace of thread %s is not a directory and could not be "
        .. "cleared (%s); nothing ran"):format(self.label, reason_of(err)))
    end
  end
  self.checked = true
  if repo and not core.fs.exists(self.dir) then from_base(self, repo, since) end
  if core.fs.exists(self.dir) and self.note then
    self.ws.existing = true
  elseif core.fs.exists(self.dir) then
    self.ws.existing = true
    local slept = keep.slept_s(self.dir)
    local ago = slept and keep.age_text(math.max(0, os.time() - slept) * 1000)
    self.note = { state = "kept", text = ("workspace kept from its sleep%s: files, dependencies and git state "
      .. "as left; background processes ended at sleep"):format(ago and (" " .. ago .. " ago") or "") }
  else
    local why = keep.expired(self.root, workspace.dir_name(self.key))
    if why then self.note = { state = "expired", text = why } end
  end
  return true
end

function Runner:take_note()
  local note = self.note
  self.note = nil
  return note
end

function Runner:exec(spec)
  local ok, err = fresh(self, spec.base, spec.base_since)
  if not ok then return nil, err end
  if self.capture and spec.base == self.capture then
    -- a copy: the env handed in may be shared (sandboxd's base env of the snapshot)
    local env = { SWITCHBOARD_BASE = "1" }
    for name, value in pairs(spec.env or {}) do if name ~= "SWITCHBOARD_BASE" then env[name] = value end end
    spec.env = env
  end
  local r, rerr = scrub(self, self.ws:run(spec))
  if self.capture and r and r.exit == 0 and not r.aborted then capture(self) end
  self.capture = nil
  return r, rerr
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

-- Sleep: kill what still runs; the workspace stays where it is, for the thread's next request
-- (issue 37: before, it was deleted, and the next ask re-cloned and re-installed everything).
-- A walled image gives its free blocks back to the host's disk (sandboxd/keep.lua compact).
-- Its directory's mtime becomes its sleep time — the budget's age (sandboxd/keep.lua) — and the
-- budget is enforced after it. A new instance of the thread woken while this one's processes
-- are still being killed waits for this one's mount to go (the image's lock, src/walls/disk.c
-- hold_image) before it mounts the same image.
--
-- "detach" (the resident's /detach: the thread leaves its worktree for good) removes the
-- workspace instead, as every sleep did before: it leaves its path before anything here yields,
-- so a thread attached again at once finds nothing of it, and an `rm -rf` child deletes it off
-- the loop (a node_modules has 10⁵ files).
function Runner:stop(reason)
  if reason == "detach" then return self:remove() end
  self.ws:stop("instance asleep")
  if core.fs.exists(self.dir) then
    local t = policy.current().timeouts
    local ok, why = keep.compact(self.dir, t.walls.stop_ms, t.walls.helper_ms)
    if self.log then
      if ok then self.log("debug", "sandboxd.workspace_compacted", { instance = self.label })
      else self.log("warn", "sandboxd.workspace_not_compacted", { instance = self.label, reason = why.message }) end
    end
    keep.touch(self.dir)
  end
  if self.after_sleep and reason ~= "shutdown" then core.go(self.after_sleep) end
end

function Runner:remove()
  local trash
  if core.fs.exists(self.dir) then
    trash = ("%s/%s%s-%s"):format(self.root, keep.TRASH, workspace.dir_name(self.key),
      core.crypto.hex(core.crypto.random_bytes(4)))
    if not os.rename(self.dir, trash) then trash = nil end
  end
  self.ws:stop("instance asleep")
  if trash == nil then
    if core.fs.exists(self.dir) then
      local ok, err = core.fs.remove_tree(self.dir)
      if not ok and core.fs.exists(self.dir) then
        error("the workspace could not be removed: " .. reason_of(err), 0)
      end
    end
    return
  end
  local deadline_ms = policy.current().timeouts.file_op.budget_ms
  core.go(function()
    local r = run.tool{ argv = { "rm", "-rf", "--", trash }, deadline_ms = deadline_ms }
    if (not r or r.exit ~= 0) and core.fs.exists(trash) then pcall(core.fs.remove_tree, trash) end
  end)
end

-- The workspace image templates of sizes snap no longer uses removed (shell/workspace.lua
-- sweep_templates): at start (half_made: a killed maker's too) and after each policy reload.
function M.sweep_templates(root, snap, log, half_made)
  local removed = workspace.sweep_templates(root, snap.isolation, { half_made = half_made })
  local say = log or core.log
  if #removed > 0 then say("info", "sandboxd.templates_swept", { removed = table.concat(removed, " ") }) end
  return removed
end

-- At start: the workspaces a previous run of sandboxd kept (or an unclean exit left) are kept
-- too, each image checked (sandboxd/keep.lua recover: kept, repaired, or discarded with a log
-- line); trash a removal left and half-made images are removed. Only names this server creates
-- are touched. Returns the counts {kept, repaired, discarded}.
function M.recover(root, log)
  M.sweep_templates(root, policy.current(), log, true)
  bases.recover(root, policy.current().timeouts.file_op.budget_ms, log or core.log)
  return keep.recover(root, policy.current().timeouts.file_op.budget_ms, log or core.log)
end

return M
