-- Per-thread workspaces: a thread key (a Slack "C123:1700000000.000100", a console thread
-- name, anything a front invents) becomes one safe directory name under a root. The name keeps
-- a readable prefix and ends with a hash of the whole key, so two keys that sanitize alike
-- ("a/b" and "a_b") never share a workspace, and nothing in a key can climb out of the root.
--
-- A workspace object is "a thread's directory, and running things in it" — what the local
-- executor and sandboxd's runner both are underneath:
--
--   local ws = workspace.open(root, thread_key [, {instance = inst}])   -- nothing created yet
--   ws.dir                           root/<dir_name(thread_key)>
--   ws:ensure()                      → dir | nil, err   (created 0700 on first use)
--   ws:run{command, env, deadline_ms, kill_grace_ms, max_output, signal, on_output}
--                                    → proc result | nil, err   (shell/run.lua's run.bash)
--   ws:read(path [, max_bytes])      → bytes | nil, err (kind escape | not_found | not_a_file
--                                      | too_large | io), confined to the workspace
--   ws:write(path, bytes)            → true | nil, err
--
-- err (core.error) from ensure, read and write is the engine's, or kind "workspace" with the
-- engine's failure as its cause.
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

local MAX_PREFIX = 48
local MODE = tonumber("700", 8)

function M.dir_name(thread_key)
  if type(thread_key) ~= "string" or thread_key == "" then
    error("a thread key must be a non-empty string", 2)
  end
  local prefix = thread_key:gsub("[^%w%-_.]", "_"):sub(1, MAX_PREFIX):gsub("^%.", "_")
  local digest = core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 16)
  return prefix .. "-" .. digest
end

function M.path(root, thread_key)
  return root .. "/" .. M.dir_name(thread_key)
end

-- Creates the workspace (and the root) when missing; returns the path or nil, err.
function M.ensure(root, thread_key)
  local dir = M.path(root, thread_key)
  local ok, err = core.fs.mkdir_p(dir, MODE)
  if not ok then return nil, err end
  return dir
end

local Workspace = {}
Workspace.__index = Workspace

-- opts.instance: the walls every command of this workspace runs inside (see shell/run.lua).
function M.open(root, thread_key, opts)
  assert(type(root) == "string" and root ~= "", "workspace.open: root (a directory) is required")
  return setmetatable({
    root = root,
    key = thread_key,
    dir = M.path(root, thread_key),
    instance = opts and opts.instance or nil,
    ready = false,
  }, Workspace)
end

-- The directory exists from the first operation on; a command may still remove its own
-- workspace, so one stat per operation checks before the directory is used.
function Workspace:ensure()
  if self.ready and core.fs.exists(self.dir) then return self.dir end
  local ok, err = core.fs.mkdir_p(self.dir, MODE)
  if not ok then
    return nil, core.error("workspace",
      "the workspace could not be created: " .. tostring(err and err.message or err), { cause = err })
  end
  self.ready = true
  return self.dir
end

-- spec: run.bash's spec without cwd and instance (the workspace's own are used).
function Workspace:run(spec)
  local dir, err = self:ensure()
  if not dir then return nil, err end
  return run.bash{
    command = spec.command, cwd = dir, env = spec.env, deadline_ms = spec.deadline_ms,
    kill_grace_ms = spec.kill_grace_ms, max_output = spec.max_output, signal = spec.signal,
    on_output = spec.on_output, instance = self.instance,
  }
end

local function with_root(self, fn)
  local dir, err = self:ensure()
  if not dir then return nil, err end
  local root, root_err = core.fs.root(dir)
  if not root then
    return nil, core.error("workspace",
      "the workspace could not be opened: " .. tostring(root_err and root_err.message or root_err),
      { cause = root_err })
  end
  local a, b = fn(root)
  root:close()
  return a, b
end

function Workspace:read(path, max_bytes)
  return with_root(self, function(root) return root:read(path, max_bytes) end)
end

function Workspace:write(path, bytes)
  return with_root(self, function(root) return root:write(path, bytes) end)
end

return M
