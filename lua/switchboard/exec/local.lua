-- The local executor: each thread's commands run on this host in a workspace of their own
-- (shell/workspace.lua: root/<safe name of the thread key>; the same "run a command in a
-- workspace" sandboxd's runner uses, through shell/run.lua's one spawn point). The
-- environment is built per command from policy (child_env) plus resolve_envs(), so a
-- credential current at the command's start reaches it through envp only.
local core = require("switchboard.core")
local child_env = require("switchboard.shell.child_env")
local errors = require("switchboard.exec.errors")
local preflight = require("switchboard.exec.preflight")
local render = require("switchboard.shell.render")
local walled = require("switchboard.shell.walled")
local workspace = require("switchboard.shell.workspace")

local M = {}
M.__index = M

-- Walled threads (policies/isolation.lua local_walls = true): one instance per workspace
-- directory, shared by every executor of the thread (agents of one thread share its workspace,
-- and two instances' uids cannot both own it). dir → the walled runner state of shell/walled.lua.
local instances = {}

local function chown_tree(dir, uid)
  local proc = core.spawn{ argv = { "chown", "-R", "-h", "-P", ("%d:%d"):format(uid, uid), "--", dir },
    env = { PATH = os.getenv("PATH") or "/usr/bin:/bin" }, deadline_ms = 120000 }
  local r = proc and proc:wait()
  if not r or r.exit ~= 0 then
    return nil, core.error("workspace", "the workspace could not be handed to its instance's user (chown): "
      .. tostring(r and r.stderr or "chown did not start"):match("^[^\n]*"))
  end
  return true
end

-- The thread's walled runner, its instance made (and the workspace's files handed to the
-- instance's uid: a thread's workspace outlives its instances here, and each instance has a uid
-- of its own). nil, err when it cannot be, or when the awake instance has another network.
local function walled_runner(self)
  local r = instances[self.dir]
  if r and r.instance and r.instance.state == "stopped" then r = nil end
  if r and r.network ~= self.network then
    return nil, errors.tool(("this thread's walled instance is awake with network %q; agent work "
      .. "asking for %q cannot run in it. An instance's network is fixed when it is made "
      .. "(policies/agents.lua network): ask in another thread, or stop this one's work first")
      :format(tostring(r.network), tostring(self.network)))
  end
  if not r then
    r = { dir = self.dir, key = self.thread_key, walls = self.walls, network = self.network,
      stopped = core.signal() }
    instances[self.dir] = r
  end
  local dir, err = walled.ensure(r)
  if not dir then return nil, err end
  if r.owned_by ~= r.instance then
    local ok, cerr = chown_tree(self.dir, r.instance:owner().uid)
    if not ok then return nil, cerr end
    r.owned_by = r.instance
  end
  return r
end

-- opts: root (workspaces root), thread_key, policy (function → the current snapshot; read only
-- when a caller passes no opts.snap), resolve_envs (optional function → NAME = value, called
-- on every exec), getenv, walls (optional: shell/instance.lua's host — the thread's commands
-- and files go behind its walls, policies/isolation.lua local_walls), network ("host" | "none",
-- with walls: the agent's)
function M.new(opts)
  assert(type(opts.root) == "string", "local executor: opts.root (a directory) is required")
  assert(type(opts.policy) == "function", "local executor: opts.policy is required")
  local ws = workspace.open(opts.root, opts.thread_key or "default")
  return setmetatable({
    walls = opts.walls,
    network = opts.walls and (opts.network or "host") or nil,
    backend = "local",
    root = opts.root,
    thread_key = opts.thread_key or "default",
    ws = ws,
    dir = ws.dir,
    policy = opts.policy,
    resolve_envs = opts.resolve_envs or function() return {} end,
    getenv = opts.getenv,
    released = core.signal(), -- release("always") stops everything still running
  }, M)
end

function M:exec(command, opts)
  opts = opts or {}
  local call, refused = preflight.command(self, command, opts)
  if not call then return nil, refused end
  local snap, limit_ms = call.snap, call.budget_ms
  -- the whole environment: policy's base (child_env) and the credential resolved now
  local env = child_env.base(snap, self.getenv)
  for name, value in pairs(call.envs) do env[name] = value end
  local stop = opts.signal and core.signal(opts.signal, self.released) or self.released
  local spec = {
    command = command,
    env = env,
    deadline_ms = limit_ms,
    kill_grace_ms = snap.timeouts.bash.kill_grace_ms,
    max_output = snap.timeouts.process.max_output_bytes,
    signal = stop,
    on_output = opts.on_output,
  }
  local r, run_err
  if self.walls then
    local wr, werr = walled_runner(self)
    if not wr and errors.is_tool(werr) then return nil, werr end
    if wr then r, run_err = walled.exec(wr, spec) else run_err = werr end
  else
    r, run_err = self.ws:run(spec)
  end
  if not r then
    if run_err and run_err.kind == "workspace" then
      return nil, errors.infra("local workspace unavailable: " .. tostring(run_err), nil, { cause = run_err })
    end
    return nil, errors.infra("local shell could not start: " .. tostring(run_err), nil, { cause = run_err })
  end
  local reason = stop.reason
  return render.result(snap, {
    exit_code = r.exit,
    stdout = r.stdout,
    stderr = r.stderr,
    duration_ms = r.duration_ms,
    timed_out = r.timed_out,
    aborted = r.aborted,
    abort_reason = type(reason) == "string" and reason or nil,
    truncated = r.truncated,
    limit_ms = limit_ms,
    where = "local shell",
    clip_line = call.clip_line,
  })
end

local FS_ERRORS = {
  escape = "%s is outside the workspace (absolute paths, `..` that climbs out and symlinks "
    .. "that point out are refused); use a path relative to the workspace",
  not_found = "%s does not exist in the workspace",
  too_large = "%s is too large to read whole; read part of it with bash (head, sed -n)",
  not_a_file = "%s is not a regular file",
}

local function fs_error(path, err)
  local template = FS_ERRORS[err.kind]
  if template then return errors.tool(template:format(path)) end
  return errors.tool(("%s: %s"):format(path, err.message))
end

local function unavailable(err)
  return errors.infra("local workspace unavailable: " .. tostring(err), nil, { cause = err })
end

-- A failure of the workspace itself is infra; one of the path (outside, missing) is the
-- model's to read.
local function file_error(path, err)
  if err and err.kind == "workspace" then return unavailable(err) end
  return fs_error(path, err)
end

-- With walls the files go through the instance's held handle, as its uid (shell/walled.lua).
local function walled_file(self, fn)
  local r, err = walled_runner(self)
  if not r then return nil, err end
  return walled.with_root(r, fn)
end

function M:read_file(path, opts)
  local bytes, err
  if self.walls then
    bytes, err = walled_file(self, function(root) return root:read(path) end)
    if bytes == nil and errors.is_tool(err) then return nil, err end
  else
    bytes, err = self.ws:read(path)
  end
  if bytes == nil then return nil, file_error(path, err) end
  return bytes
end

function M:write_file(path, bytes, opts)
  local ok, err
  if self.walls then
    local r = instances[self.dir]
    local refused = r and walled.over_cap(r)
    if refused then return nil, errors.tool(refused.message) end -- names the cap and what to do
    ok, err = walled_file(self, function(root) return root:write(path, bytes) end)
    if not ok and errors.is_tool(err) then return nil, err end
  else
    ok, err = self.ws:write(path, bytes)
  end
  if not ok then return nil, file_error(path, err) end
  return true
end

-- The line the card shows under its header (exec/stack.lua): whether this executor's commands
-- run behind walls.
function M:walls_note()
  if self.walls then
    return ("local executor: walled, network %s (policies/isolation.lua local_walls)"):format(self.network)
  end
  return "local executor: unwalled — commands run as this host's user (policies/isolation.lua local_walls)"
end

-- "always" (a hard stop, a read-only run): stop whatever still runs — with walls, the thread's
-- whole instance (what a command left running in the background too). The workspace stays for
-- the thread's follow-ups either way.
function M:release(mode)
  if mode == "always" then
    self.released:abort("released")
    local r = self.walls and instances[self.dir]
    if r then
      instances[self.dir] = nil
      r.stopped:abort("released")
      walled.stop(r)
    end
  end
  if self.released.aborted then self.released = core.signal() end
  return true
end

return M
