-- Where the program starts processes. Two spawn points, and nothing else in the program calls
-- core.spawn (shell/instance.lua starts the walls helper itself — the instance's holder and its
-- one-shot runs — since that process is the walls):
--
--   run.bash  every `bash -c` the program runs for a thread (run.start: the same, not awaited —
--             sandboxd's background processes) — the local executor's and
--             sandboxd's alike (through shell/workspace.lua). Whatever must hold for every
--             command (an instance's namespaces and cgroup, a limit) is added here once.
--   run.tool  a host tool the program runs for itself (chown, du, rm, chmod, git, kill): its
--             argv as given, an environment of PATH alone unless one is given, and always a
--             deadline, the caller's from policy.
--
--   local r, err = run.bash{
--     command      = "npm test",          -- the shell text, run as `bash -c <command>`
--     cwd          = dir,                 -- the workspace (shell/workspace.lua ensures it)
--     env          = {NAME = value},      -- the whole environment (envp only, never argv)
--     deadline_ms  = ms,                  -- TERM to the process group at the deadline …
--     kill_grace_ms = ms,                 -- … then KILL after the grace
--     max_output   = bytes,               -- per stream; more is dropped and marked truncated
--     signal       = sig,                 -- core.signal(): aborting it kills the group at once
--     on_output    = fn(stream, bytes),   -- optional: streamed output
--     instance     = inst,                -- optional: the walls the command runs inside (below)
--   }
--   r   = core.spawn's result after proc:wait(): {exit, signal, timed_out, aborted, stdout,
--         stderr, truncated, duration_ms}
--   err = the engine's spawn failure ({kind, message}) when the shell could not start
--
--   local r, err = run.tool{argv, deadline_ms, cwd?, env?, kill_grace_ms?, max_output?, signal?}
--
-- instance: an object with :spawn_args(args) → args | nil, err. It receives the table that
-- would go to core.spawn and returns the one to use (for example with `walls`, the socket of
-- the instance's spawner that starts it inside). Without one the command runs on this host in cwd.
local core = require("switchboard.core")

local M = {}

-- bash by its absolute path, found once in the program's own PATH: the command's env may set
-- PATH to anything, "" included (a sandboxd request's env does), which must change what the
-- command finds, never whether bash starts.
local bash_path
function M.bash_path()
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

-- What a spec hands core.spawn as it is.
local PASSED = { "cwd", "env", "deadline_ms", "kill_grace_ms", "max_output", "signal", "on_output" }

local function spawn_args(argv, spec)
  local args = { argv = argv }
  for _, name in ipairs(PASSED) do args[name] = spec[name] end
  return args
end

-- The core.spawn arguments of one command, before any instance sees them.
function M.spawn_args(spec)
  return spawn_args({ M.bash_path(), "-c", spec.command }, spec)
end

-- run.bash's spec, the command started and not awaited: the proc (core.spawn's) | nil, err.
-- sandboxd's background processes (sandboxd/processes.lua) wait on it themselves.
function M.start(spec)
  assert(type(spec.command) == "string", "run.start: spec.command (the shell text) is required")
  local args = M.spawn_args(spec)
  if spec.instance ~= nil then
    local err
    args, err = spec.instance:spawn_args(args)
    if args == nil then return nil, err end
  end
  return core.spawn(args)
end

function M.bash(spec)
  local proc, err = M.start(spec)
  if not proc then return nil, err end
  return proc:wait()
end

function M.tool(spec)
  assert(type(spec.argv) == "table" and spec.argv[1], "run.tool: spec.argv is required")
  assert(type(spec.deadline_ms) == "number", "run.tool: spec.deadline_ms (from policy) is required")
  local args = spawn_args(spec.argv, spec)
  args.env = spec.env or { PATH = os.getenv("PATH") or "/usr/bin:/bin" }
  args.on_output = nil -- a tool's output is its result's
  local proc, err = core.spawn(args)
  if not proc then return nil, err end
  return proc:wait()
end

return M
