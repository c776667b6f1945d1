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
local workspace = require("switchboard.shell.workspace")

local M = {}
M.__index = M

-- dir → {walled = ws, open = ws}: the thread's workspace (shell/workspace.lua), shared by every
-- executor of the thread — agents of one thread share its directory, and behind walls its one
-- instance (two instances' uids cannot both own it). Its files outlive the instances
-- (existing): each new instance gets them handed to its uid.
local shared = {}

-- The thread's workspace for this executor, or nil, a tool error when its walled instance is
-- awake with another network than this agent's.
local function workspace_of(self)
  local slot = self.slot
  local mine = shared[self.dir] or {}
  shared[self.dir] = mine
  local ws = mine[slot]
  if ws and ws.network ~= self.network then
    if ws.instance and ws.instance.state ~= "stopped" then
      return nil, errors.tool(("this thread's walled instance is awake with network %q; agent work "
        .. "asking for %q cannot run in it. An instance's network is fixed when it is made "
        .. "(policies/agents.lua network): ask in another thread, or stop this one's work first")
        :format(tostring(ws.network), tostring(self.network)))
    end
    ws = nil
  end
  if not ws then
    ws = workspace.open(self.root, self.thread_key, { walls = self.walls, network = self.network,
      existing = true })
    mine[slot] = ws
  end
  return ws
end

-- opts: root (workspaces root), thread_key, policy (function → the current snapshot; read only
-- when a caller passes no opts.snap), resolve_envs (optional function → NAME = value, called
-- on every exec), getenv, walls (optional: shell/instance.lua's host — the thread's commands
-- and files go behind its walls, policies/isolation.lua local_walls), network ("host" | "none",
-- with walls: the agent's)
function M.new(opts)
  assert(type(opts.root) == "string", "local executor: opts.root (a directory) is required")
  assert(type(opts.policy) == "function", "local executor: opts.policy is required")
  return setmetatable({
    walls = opts.walls,
    network = opts.walls and (opts.network or "host") or nil,
    slot = opts.walls and "walled" or "open", -- which of the thread's shared workspaces is its
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

-- The thread's directory on this host (the one every agent of the thread shares): what an
-- agent's system prompt names as its workspace.
function M:workspace_dir() return self.dir end

function M:exec(command, opts)
  opts = opts or {}
  local call, refused = preflight.command(self, command, opts)
  if not call then return nil, refused end
  local snap, limit_ms = call.snap, call.budget_ms
  -- the whole environment: policy's base (child_env) and the credential resolved now
  local env = child_env.base(snap, self.getenv, self.walls ~= nil)
  for name, value in pairs(call.envs) do env[name] = value end
  local ws, refused_ws = workspace_of(self)
  if not ws then return nil, refused_ws end
  local stop = opts.signal and core.signal(opts.signal, self.released) or self.released
  local r, run_err = ws:run{ command = command, env = env, deadline_ms = limit_ms,
    kill_grace_ms = snap.timeouts.bash.kill_grace_ms, max_output = snap.timeouts.process.max_output_bytes,
    signal = stop, on_output = opts.on_output }
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

local function unavailable(err)
  return errors.infra("local workspace unavailable: " .. tostring(err), nil, { cause = err })
end

-- A failure of the workspace itself is infra; one of the path (outside, missing) is the
-- model's to read.
local function file_error(path, err)
  if err and err.kind == "workspace" then return unavailable(err) end
  return errors.path(path, err.kind, err.message)
end

function M:read_file(path, opts)
  local ws, refused = workspace_of(self)
  if not ws then return nil, refused end
  local bytes, err = ws:read(path)
  if bytes == nil then return nil, file_error(path, err) end
  return bytes
end

function M:write_file(path, bytes, opts)
  local ws, refused = workspace_of(self)
  if not ws then return nil, refused end
  local ok, err = ws:write(path, bytes)
  -- the walls' size cap: its text names the cap and what to do
  if not ok and err and err.kind == "too_large" then return nil, errors.tool(err.message) end
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

-- "always" (a hard stop, a read-only run): stop whatever still runs in the thread's workspace
-- — with walls, its whole instance (what a command left running in the background too). The
-- workspace's files stay for the thread's follow-ups either way.
function M:release(mode)
  if mode == "always" then
    self.released:abort("released")
    local mine = shared[self.dir]
    local ws = mine and mine[self.slot]
    if ws then
      mine[self.slot] = nil
      ws:stop("released")
    end
  end
  if self.released.aborted then self.released = core.signal() end
  return true
end


---------------------------------------------------------------------------------------------
-- The backend's declaration (exec/backends.lua): this host, a workspace per thread.

-- The local executor's walls (policies/isolation.lua local_walls = true): one host per
-- workspace root for this process, built (and proven with a real instance) on first use.
-- A host that cannot wall is never replaced by running unwalled: provisioning fails, saying why.
local local_hosts = {} -- workspace root → shell/instance.lua host
-- workspace root → core.signal() while one task builds its host. Building one yields (the
-- proof runs a real instance), and threads provisioned at once (three messages in a row) must
-- not each build another: hosts of one process share its cgroup directory and slot numbers, so
-- a second host's instance i0 reaps the first's (SIGKILL to its holder).
local building = {}
-- a wake-up bound only (the loop waits again); the proof's own bounds are timeouts.walls'
local BUILD_WAIT_MS = 120000

local function build_local_walls(opts, snap, root)
  local ok, err = core.fs.mkdir_p(root, tonumber("700", 8))
  if not ok then return nil, core.error("workspace", "cannot create " .. root .. ": " .. tostring(err and err.message), { cause = err }) end
  local host, why
  if opts.walls_host then
    host, why = opts.walls_host(snap, root)
  else
    host, why = require("switchboard.shell.instance").host{
      snap = snap, policy = opts.policy, scratch = root, log = core.log,
      owner = { kind = "local executor", root = root } }
  end
  if not host then return nil, why end
  return host
end

local function local_walls(opts, snap, root)
  while building[root] and not local_hosts[root] do core.sleep(BUILD_WAIT_MS, building[root]) end
  if local_hosts[root] then return local_hosts[root] end
  local done = core.signal()
  building[root] = done
  local host, why = build_local_walls(opts, snap, root)
  building[root] = nil
  done:abort("built")
  if host then local_hosts[root] = host end
  return host, why
end

local function build(opts, ctx, snap, _, kit)
  local root = opts.workspace_root
  if not root then return kit.missing("a workspace root") end
  local walls
  if kit.walled then
    local why
    walls, why = local_walls(opts, snap, root)
    if not walls then
      return nil, errors.tool("policies/isolation.lua asks for walls around local threads "
        .. "(local_walls = true), but they cannot be built here: " .. tostring(why)
        .. ". Run where the kernel gives user namespaces, cgroups and bubblewrap, as root "
        .. "(docs/isolation.md), or point this front at a sandboxd (SANDBOX_URL, SANDBOX_TOKEN)")
    end
  elseif opts.refuse_unwalled then
    -- a front that serves other people, started without --allow-unwalled-commands: a reload
    -- that turned its walls off does not run anyone's command next to the bot's secrets
    return nil, errors.tool(("the local executor would run agent %s's commands unwalled, next to "
      .. "this bot's secrets (policies/isolation.lua local_walls.%s is false); set it to true, point "
      .. "the bot at a sandboxd (SANDBOX_URL, SANDBOX_TOKEN), or restart it with "
      .. "--allow-unwalled-commands"):format(tostring(ctx.agent), tostring(opts.front or "default")))
  elseif kit.network == "none" then
    return kit.no_offline("the local executor runs unwalled (policies/isolation.lua local_walls = false) "
      .. "and cannot take its commands off the network", "set local_walls = true, or use the sandbox backend")
  end
  return M.new{
    root = root, thread_key = ctx.thread_key, policy = opts.policy,
    resolve_envs = kit.resolve_envs, getenv = opts.getenv,
    walls = walls, network = kit.network,
  }
end

M.backend = {
  name = "local",
  help = "this host, a workspace per thread (walls: isolation.lua)",
  configured = function() return true end,
  on_this_host = function() return true end,
  build = build,
}

return M
