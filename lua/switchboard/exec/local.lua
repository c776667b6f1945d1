-- The local executor: each thread's commands run on this host in a workspace of their own
-- (root/<safe name of the thread key>), through the engine's process supervisor. The
-- environment is built per command from policy (child_env) plus resolve_envs(), so a
-- credential current at the command's start reaches it through envp only.
local core = require("switchboard.core")
local budget = require("switchboard.exec.budget")
local child_env = require("switchboard.exec.child_env")
local errors = require("switchboard.exec.errors")
local render = require("switchboard.exec.render")
local workspace = require("switchboard.exec.workspace")

local M = {}
M.__index = M

-- opts: root (workspaces root), thread_key, policy (function → the snapshot new work
-- captures), resolve_envs (optional function → NAME = value, called on every exec), getenv
function M.new(opts)
  assert(type(opts.root) == "string", "local executor: opts.root (a directory) is required")
  assert(type(opts.policy) == "function", "local executor: opts.policy is required")
  return setmetatable({
    backend = "local",
    root = opts.root,
    thread_key = opts.thread_key or "default",
    dir = workspace.path(opts.root, opts.thread_key or "default"),
    policy = opts.policy,
    resolve_envs = opts.resolve_envs or function() return {} end,
    getenv = opts.getenv,
    released = core.signal(), -- release("always") stops everything still running
  }, M)
end

local function command_env(self, snap)
  local env = child_env.base(snap, self.getenv)
  local extra, err = self.resolve_envs()
  if extra == nil then return nil, err end
  for name, value in pairs(extra) do env[name] = value end
  return env
end

function M:exec(command, opts)
  opts = opts or {}
  if type(command) ~= "string" or command == "" then
    return nil, errors.tool("bash needs a command to run")
  end
  local snap = self.policy()
  local plan, refusal = budget.within_run(snap, opts.timeout_ms, opts.remaining_ms)
  if not plan then return nil, refusal end
  local limit_ms = plan.timeout_ms or budget.clamp(snap, nil)
  local dir, err = workspace.ensure(self.root, self.thread_key)
  if not dir then
    return nil, errors.infra("local workspace unavailable: " .. tostring(err.message))
  end
  local env, env_err = command_env(self, snap)
  if not env then
    -- A GitHub API failure keeps its span code (http <status>, timeout); anything else is infra.
    local code = type(env_err) == "table" and errors.valid_code(env_err.code) and env_err.code or nil
    return nil, errors.infra("credentials for this command could not be resolved: "
      .. tostring(env_err), code)
  end
  local stop = opts.signal and core.signal(opts.signal, self.released) or self.released
  local proc, spawn_err = core.spawn{
    argv = { "bash", "-c", command },
    cwd = dir,
    env = env,
    deadline_ms = limit_ms,
    kill_grace_ms = snap.timeouts.bash.kill_grace_ms,
    max_output = snap.timeouts.process.max_output_bytes,
    signal = stop,
    on_output = opts.on_output,
  }
  if not proc then
    return nil, errors.infra("local shell could not start: " .. spawn_err.message)
  end
  local r = proc:wait()
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
    clip_line = plan.clip_line,
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

local function root_of(self)
  local dir, err = workspace.ensure(self.root, self.thread_key)
  if not dir then
    return nil, errors.infra("local workspace unavailable: " .. tostring(err.message))
  end
  local root, root_err = core.fs.root(dir)
  if not root then
    return nil, errors.infra("local workspace unavailable: " .. tostring(root_err.message))
  end
  return root
end

function M:read_file(path, opts)
  local root, err = root_of(self)
  if not root then return nil, err end
  local bytes, read_err = root:read(path)
  root:close()
  if bytes == nil then return nil, fs_error(path, read_err) end
  return bytes
end

function M:write_file(path, bytes, opts)
  local root, err = root_of(self)
  if not root then return nil, err end
  local ok, write_err = root:write(path, bytes)
  root:close()
  if not ok then return nil, fs_error(path, write_err) end
  return true
end

-- "always" (a hard stop, a read-only run): stop whatever still runs. The workspace stays for
-- the thread's follow-ups either way.
function M:release(mode)
  if mode == "always" then self.released:abort("released") end
  if self.released.aborted then self.released = core.signal() end
  return true
end

return M
