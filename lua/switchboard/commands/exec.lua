-- `switchboard exec`: one command through an agent's executor, from the command line.
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local repo_secrets = require("switchboard.store.secrets")
local state = require("switchboard.state")
local policy = require("switchboard.policy")
local errors = require("switchboard.exec.errors")
local render = require("switchboard.shell.render")
local instance = require("switchboard.shell.instance")
local stack = require("switchboard.exec.stack")
local parser = require("switchboard.dispatch.parser")

local M = {
  name = "exec",
  summary = "run one shell command through an agent's executor and print the tool result",
  quiet_logs = true,
}

-- Exit statuses besides the command's own (0-255, 124 when the deadline killed it).
M.EXIT = {
  usage = prologue.EXIT.usage,   -- bad arguments
  capacity = 75,      -- the sandbox fleet stayed full for the whole wait (EX_TEMPFAIL)
  config = prologue.EXIT.config, -- the policies do not load, or the backend is not configured
  infra = 125,        -- the executor's transport failed (sandbox unreachable, no shell)
  refused = 126,      -- refused before running: the agent has no workspace, a bad path
  stopped = 130,      -- stopped by SIGINT/SIGTERM (the process group was killed)
}

M.help = [[
Usage: switchboard exec [OPTIONS] -- COMMAND...

Joins the words after `--` into one shell command, runs it with `bash -c` in the thread's
workspace through the agent's executor, prints the tool-result text a model would read and
exits with the command's own status.

Options:
  --thread KEY            the conversation thread; its workspace is reused (default: cli)
  --workspace-root DIR    where local workspaces live
                          (default: $SWITCHBOARD_STATE_DIR/workspaces, see docs/cli.md)
  --timeout-ms N          the command's budget; clamped by policy into [1 s, 20 min],
                          5 min when absent
  --agent NAME            the agent whose resources and backend apply (default: policy's
                          default agent)
  --repo OWNER/NAME       the repository the agent works on
  --backend NAME          override policy's backend, one of:
                            {backends}
  --sandbox-url URL       the sandboxd to use with --backend sandbox (token: $SANDBOX_TOKEN)
  --trace FILE            write exec.* spans as JSON lines to FILE (`-` for stderr)

Exit status:
  the command's own; 124 when its deadline killed it (the text names the limit and the
  timeoutMs knob); 2 bad arguments; 75 the sandbox fleet stayed full; 78 policies or
  backend configuration broken; 125 infrastructure failure (the executor could not run it);
  126 refused (the agent has no workspace, a path outside it); 130 stopped by a signal.

Examples:
  switchboard exec -- echo hello
  switchboard exec --timeout-ms 1000 -- sleep 5          # exit 124 after about 1 s
  switchboard exec --thread t1 -- 'echo hi > marker.txt'
  switchboard exec --thread t1 -- cat marker.txt         # same workspace: prints hi
  SANDBOX_TOKEN=… switchboard exec --backend sandbox --sandbox-url http://127.0.0.1:8080 -- uname -a
]]

local SPEC = {
  thread = "string", ["workspace-root"] = "string", ["timeout-ms"] = "number",
  agent = "string", repo = "string", backend = "string", ["sandbox-url"] = "string",
  trace = "string",
}

local function status_of(err)
  if errors.is_capacity(err) then return M.EXIT.capacity end
  if errors.is_infra(err) then return M.EXIT.infra end
  return M.EXIT.refused
end

-- TERM/INT stop the command (its process group dies) and exit 130.
local function stop_on_signals(stop)
  local function handler(name) stop:abort("stopped by SIG" .. name) end
  core.on_signal("TERM", handler)
  core.on_signal("INT", handler)
end

local function usage_problem(p)
  if #p.words > 0 then return ("unexpected %q: put the command after `--`"):format(p.words[1]) end
  if p.rest == nil or #p.rest == 0 then
    return "no command given; usage: switchboard exec [OPTIONS] -- COMMAND..."
  end
  -- the same rule the console's `in OWNER/REPO` follows
  if p.opts.repo ~= nil and not parser.valid_repo(p.opts.repo) then
    return ("--repo %q is not a repository name; %s"):format(p.opts.repo,
      parser.REPO_HINT:gsub("`in ", "`--repo "))
  end
end

local function run(argv, ctx)
  local p, status = prologue.start_with_backend(M, argv, ctx, SPEC, usage_problem)
  if not p then return status end
  local opts, rest, snap = p.opts, p.rest, p.snap
  local agent = opts.agent or snap.agents.default_agent
  local sink, trace_status = p:trace_sink()
  if opts.trace and not sink then return trace_status end
  -- a person's own terminal (policies/isolation.lua local_walls)
  local built, err = stack.build(repo_secrets.with_source(p:stack_options(sink, "exec"), state.dir()), { thread_key = opts.thread or "cli", agent = agent, repo = opts.repo, snap = snap })
  if not built then return p:fail(M.EXIT.config, tostring(err)) end
  local function note(line) p:note(line) end
  for _, line in ipairs(built.notes or { built.note }) do note(line) end
  p:notice(policy.agent(snap, agent), note)

  local stop = core.signal()
  stop_on_signals(stop)
  local result, exec_err = built.executor:exec(table.concat(rest, " "), {
    timeout_ms = opts.timeout_ms, signal = stop, snap = snap,
  })
  if result == nil then
    if errors.is_refused(exec_err) then
      p:say(render.refused(exec_err))
      return exec_err.exit_code or 124
    end
    return p:fail(status_of(exec_err), tostring(exec_err))
  end
  p:say(result.text)
  if result.aborted then return M.EXIT.stopped end
  if result.timed_out then
    -- The text names the model's knob (timeoutMs); a person at a shell has this one.
    p:note(("the command hit its budget; from the command line give it more with "
      .. "--timeout-ms N (up to %d, timeouts bash.max_ms)"):format(snap.timeouts.bash.max_ms))
  end
  return result.exit_code
end

-- The local executor's walls (policies/isolation.lua local_walls) live as long as the process:
-- closed when the command is done, so its instance's cgroups do not outlive it.
function M.run(argv, ctx)
  local status = run(argv, ctx)
  instance.close_all()
  return status
end

return M
