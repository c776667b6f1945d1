-- Per-thread workspaces: a thread key (a Slack "C123:1700000000.000100", a console thread
-- name, anything a front invents) becomes one safe directory name under a root. The name keeps
-- a readable prefix and ends with a hash of the whole key, so two keys that sanitize alike
-- ("a/b" and "a_b") never share a workspace, and nothing in a key can climb out of the root.
--
-- A workspace object is "a thread's directory, and running things in it", walled or not — the
-- one thing the local executor and sandboxd's runner (and so the resident's) run in. Whether
-- its commands and files go behind an instance's walls is decided here, once:
--
--   local ws = workspace.open(root, thread_key [, opts])   -- nothing created yet
--     opts.walls     shell/instance.lua's host: every command and file goes behind the walls
--                    of an instance of it (made on first use, shell/walled.lua)
--     opts.network   "host" | "none" for that instance (nil: policies/isolation.lua network)
--     opts.existing  the directory's files are the thread's own and outlive its instances (the
--                    local executor's workspace, the resident's worktree): each new instance
--                    gets them handed to its uid; without it a new instance starts empty
--     opts.ro_binds  host directories its instances show read-only (the resident's objects)
--     opts.label, opts.log   how the walls' events name the thread, and where they go
--   ws.dir                           root/<dir_name(thread_key)>
--   ws:ensure()                      → dir | nil, err   (created 0700 on first use; walled:
--                                      the instance made and started)
--   ws:run{command, env, deadline_ms, kill_grace_ms, max_output, signal, on_output}
--                                    → proc result | nil, err   (shell/run.lua's run.bash)
--   ws:read(path [, max_bytes])      → bytes | nil, err (kind escape | not_found | not_a_file
--                                      | too_large | io), confined to the workspace
--   ws:write(path, bytes)            → true | nil, err (walled: refused past the size cap)
--   ws:files_remade()                its files were made anew outside it (walled: handed to
--                                    the instance's uid again on the next ensure)
--   ws:stop([reason])                every process of it killed (walled: the instance down);
--                                    the directory stays; its owner opens a new workspace for
--                                    what comes next
--
-- err (core.error) from ensure, read and write is the engine's, or kind "workspace" with the
-- engine's failure as its cause.
--
--   workspace.sweep_templates(root, isolation, opts?) → names removed   the workspace image
--                                    templates of root of every size but the one isolation says
--                                    (opts.half_made: a killed maker's ".new" files too)
local core = require("switchboard.core")
local run = require("switchboard.shell.run")
local walled = require("switchboard.shell.walled")

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

-- The walled workspaces' image templates (src/walls/disk.c open_template): one fresh ext4 of
-- each size, made on first need in the workspaces' root and copied into each new image. A
-- policy that changes workspace_max_bytes (or says workspace_size = "measured": no images) gets
-- another or none, so the old size's would stay for good: removed here at sandboxd's start and
-- after each reload. An instance still on the old size's snapshot that needs one after this
-- makes it again (one mkfs); an awake instance never needs its template again (its image is
-- its own). A ".new" file is a template being made: only at start (opts.half_made) is none
-- being made, so only then is one removed (a killed maker's).
local TEMPLATE = "^%.workspace%-template%-(%d+)%.img$"
local HALF_MADE = "^%.workspace%-template%-%d+%.img%.new$"

function M.sweep_templates(root, isolation, opts)
  local used = isolation.workspace_size ~= "measured" and tostring(isolation.workspace_max_bytes) or nil
  local removed = {}
  for _, name in ipairs(core.fs.list(root) or {}) do
    if type(name) == "table" then name = name.name end
    local size = type(name) == "string" and name:match(TEMPLATE)
    local half = type(name) == "string" and opts and opts.half_made and name:match(HALF_MADE)
    if (size and size ~= used) or half then
      if os.remove(root .. "/" .. name) then removed[#removed + 1] = name end
    end
  end
  table.sort(removed)
  return removed
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

function M.open(root, thread_key, opts)
  assert(type(root) == "string" and root ~= "", "workspace.open: root (a directory) is required")
  opts = opts or {}
  return setmetatable({
    root = root,
    key = thread_key,
    dir = M.path(root, thread_key),
    walls = opts.walls,
    network = opts.walls and opts.network or nil,
    existing = opts.existing,
    ro_binds = opts.ro_binds,
    label = opts.label,
    log = opts.log,
    stopped = core.signal(), -- ws:stop(): every process of this workspace is killed at once
    ready = false,
  }, Workspace)
end

-- The directory exists from the first operation on; a command may still remove its own
-- workspace, so one stat per operation checks before the directory is used.
function Workspace:ensure()
  if self.walls then return walled.ensure(self) end
  if self.ready and core.fs.exists(self.dir) then return self.dir end
  local ok, err = core.fs.mkdir_p(self.dir, MODE)
  if not ok then
    return nil, core.error("workspace",
      "the workspace could not be created: " .. tostring(err and err.message or err), { cause = err })
  end
  self.ready = true
  return self.dir
end

-- spec: run.bash's spec without cwd and instance (the workspace's own are used); its signal
-- joins the workspace's stop.
function Workspace:run(spec)
  local own = {
    command = spec.command, env = spec.env, deadline_ms = spec.deadline_ms,
    kill_grace_ms = spec.kill_grace_ms, max_output = spec.max_output, on_output = spec.on_output,
  }
  if self.walls then -- with its instance, in /workspace
    own.signal = spec.signal -- walled.exec joins it to the workspace's stop (one signal, not two)
    return walled.exec(self, own)
  end
  own.signal = spec.signal and core.signal(self.stopped, spec.signal) or self.stopped
  local dir, err = self:ensure()
  if not dir then return nil, err end
  own.cwd = dir
  return run.bash(own)
end

-- fn(root) over the workspace's confined handle: walled, the instance's held one (as its uid).
local function with_root(self, fn)
  if self.walls then return walled.with_root(self, fn) end
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
  local refused = self.walls and walled.over_cap(self)
  if refused then return nil, refused end
  return with_root(self, function(root) return root:write(path, bytes) end)
end

-- The files were made anew outside the workspace (the resident's re-attach): walled, the next
-- ensure hands them to its instance's uid, an instance already awake included.
function Workspace:files_remade()
  self.files_uid = nil
end

function Workspace:stop(reason)
  self.stopped:abort(reason or "workspace stopped")
  if self.walls then walled.stop(self) end
end

return M
