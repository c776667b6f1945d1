-- How one sandboxd instance runs commands and touches files: on this host, in the thread's
-- workspace root/<workspace.dir_name(thread key)>, through the engine's process supervisor
-- (own session and process group, deadline TERM then KILL after the grace, capped capture) and
-- the confined file access of core.fs.root. The fleet (fleet.lua) decides WHEN an instance
-- exists; this decides HOW it runs — a later runner puts each instance in its own namespaces
-- behind the same four methods:
--
--   runner:exec{command, env, deadline_ms, kill_grace_ms, max_output, signal} → proc result | nil, err
--   runner:read(path, max_bytes)  → bytes | nil, err (kind escape | not_found | not_a_file | too_large | io)
--   runner:write(path, bytes)     → true | nil, err
--   runner:stop(reason)           → kill what still runs, delete the workspace (sleep; reason
--                                   "idle" | "shutdown")
local core = require("switchboard.core")
local workspace = require("switchboard.exec.workspace")

local M = {}

local Runner = {}
Runner.__index = Runner

function M.new(root, thread_key)
  return setmetatable({
    root = root,
    key = thread_key,
    dir = workspace.path(root, thread_key),
    label = M.label(thread_key),
    stopped = core.signal(), -- sleep: every process of this instance is killed at once
  }, Runner)
end

-- How logs and errors name a thread: a hash of its key, never the key (or a path) itself.
function M.label(thread_key)
  return "t-" .. core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 12)
end

-- new_runner for fleet.new
function M.factory(root)
  return function(thread_key) return M.new(root, thread_key) end
end

-- An error's reason without the host path it names ("mkdir_p \"/srv/…\": Read-only file
-- system" → "Read-only file system"): errors go to the client, paths of the host do not.
local function reason_of(err)
  local msg = tostring(type(err) == "table" and err.message or err)
  return msg:match(":%s*([^:]+)$") or "an I/O error"
end

local function workspace_error(self, what, err)
  return { kind = "workspace", message = ("the workspace of thread %s could not be %s (%s)")
    :format(self.label, what, reason_of(err)) }
end

-- The workspace exists from the instance's first operation until it sleeps; a command may
-- still remove its own directory, so one stat per operation checks before the cwd is used.
-- A new instance never starts on data of an old one: a directory already there when it first
-- needs one is what a sleep failed to remove, and it is removed now (or nothing runs).
local function ensure(self)
  if self.ready and core.fs.exists(self.dir) then return self.dir end
  if not self.ready and core.fs.exists(self.dir) then
    local removed, rm_err = core.fs.remove_tree(self.dir)
    if not removed and core.fs.exists(self.dir) then
      return nil, workspace_error(self, "cleared of an earlier instance's files", rm_err)
    end
  end
  local ok, err = core.fs.mkdir_p(self.dir, tonumber("700", 8))
  if not ok then return nil, workspace_error(self, "created", err) end
  self.ready = true
  return self.dir
end

-- bash by its absolute path, found once in the server's own PATH: a request's env may set PATH
-- to anything, "" included, which changes what the command finds, never whether bash starts.
local bash_path
local function bash()
  if bash_path == nil then
    for dir in (os.getenv("PATH") or "/usr/local/bin:/usr/bin:/bin"):gmatch("[^:]+") do
      if dir:sub(1, 1) == "/" and core.fs.exists(dir .. "/bash") then
        bash_path = dir .. "/bash"
        break
      end
    end
    bash_path = bash_path or "bash"
  end
  return bash_path
end

function Runner:exec(spec)
  local dir, err = ensure(self)
  if not dir then return nil, err end
  local signal = spec.signal and core.signal(self.stopped, spec.signal) or self.stopped
  local proc, spawn_err = core.spawn{
    argv = { bash(), "-c", spec.command },
    cwd = dir,
    env = spec.env,
    deadline_ms = spec.deadline_ms,
    kill_grace_ms = spec.kill_grace_ms,
    max_output = spec.max_output,
    signal = signal,
  }
  if not proc then return nil, spawn_err end
  return proc:wait()
end

local function with_root(self, fn)
  local dir, err = ensure(self)
  if not dir then return nil, err end
  local root, root_err = core.fs.root(dir)
  if not root then return nil, workspace_error(self, "opened", root_err) end
  local a, b = fn(root)
  root:close()
  return a, b
end

function Runner:read(path, max_bytes)
  return with_root(self, function(root) return root:read(path, max_bytes) end)
end

function Runner:write(path, bytes)
  return with_root(self, function(root) return root:write(path, bytes) end)
end

local TRASH = ".trash-"

local function remove_now(dir)
  local ok, err = core.fs.remove_tree(dir)
  if not ok and core.fs.exists(dir) then
    error("the workspace could not be removed: " .. reason_of(err), 0)
  end
end

-- Sleep: kill what still runs and delete the workspace. Deleting a large tree (a node_modules
-- has 10⁵ files) takes seconds, and the loop must not stall for it — every heartbeat and every
-- accept would wait. So the workspace is renamed out of the way at once (the thread's next
-- instance can start on a fresh directory immediately) and removed by an `rm -rf` child. On
-- shutdown (reason "shutdown") it is removed before returning; a trash directory an exit
-- interrupted is removed by the next start's sweep.
function Runner:stop(reason)
  self.stopped:abort("instance asleep")
  if not core.fs.exists(self.dir) then return end
  if reason == "shutdown" then return remove_now(self.dir) end
  local trash = ("%s/%s%s-%s"):format(self.root, TRASH, workspace.dir_name(self.key),
    core.crypto.hex(core.crypto.random_bytes(4)))
  if not os.rename(self.dir, trash) then return remove_now(self.dir) end
  local proc = core.spawn{ argv = { "rm", "-rf", "--", trash }, env = { PATH = os.getenv("PATH") } }
  if not proc then return remove_now(trash) end
  core.go(function()
    local r = proc:wait()
    if r.exit ~= 0 and core.fs.exists(trash) then pcall(core.fs.remove_tree, trash) end
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
