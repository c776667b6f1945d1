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
--   runner:stop()                 → kill what still runs, delete the workspace (sleep)
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
    stopped = core.signal(), -- sleep: every process of this instance is killed at once
  }, Runner)
end

-- new_runner for fleet.new
function M.factory(root)
  return function(thread_key) return M.new(root, thread_key) end
end

local function ensure(self)
  local dir, err = workspace.ensure(self.root, self.key)
  if not dir then
    return nil, { kind = "workspace", message = "the workspace could not be created: " .. tostring(err and err.message) }
  end
  return dir
end

function Runner:exec(spec)
  local dir, err = ensure(self)
  if not dir then return nil, err end
  local signal = spec.signal and core.signal(self.stopped, spec.signal) or self.stopped
  local proc, spawn_err = core.spawn{
    argv = { "bash", "-c", spec.command },
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
  if not root then return nil, root_err end
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

function Runner:stop()
  self.stopped:abort("instance asleep")
  if core.fs.exists(self.dir) then
    local ok, err = core.fs.remove_tree(self.dir)
    if not ok then error("the workspace could not be removed: " .. tostring(err and err.message), 0) end
  end
end

-- At start: workspaces left in root by a server that did not shut down cleanly belong to no
-- instance; they are removed like a slept instance's. Only names this module creates
-- (<prefix>-<16 hex digits>) are touched, nothing else in root. Returns the count removed.
function M.sweep(root)
  local names = core.fs.list(root)
  if not names then return 0 end
  local n = 0
  for _, name in ipairs(names) do
    if name:find("%-%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$") then
      if core.fs.remove_tree(root .. "/" .. name) then n = n + 1 end
    end
  end
  return n
end

return M
