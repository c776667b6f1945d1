-- The bash tool: a command in the thread's workspace through its executor stack (the walls,
-- the clamp of timeoutMs, the run's deadlines). With run_in_background (offered only where the
-- executor has background processes: sandboxd, Kubernetes) the command is started and not
-- awaited (agent/processes.lua): the result is its process id, what it printed in its first
-- moments (agents.processes.settle_ms) and whether it still runs.
local budget = require("switchboard.shell.budget")
local processes = require("switchboard.agent.processes")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

local function minutes(ms)
  local m = ms / 60000
  if m == math.floor(m) then return ("%d min"):format(m) end
  return ("%g s"):format(ms / 1000)
end

-- can: what the executor can do (agent/tools.lua executor_can).
function M.definition(snap, _, can)
  local b = snap.timeouts.bash
  local description = ("Run a bash command in the workspace (the repository's checkout is the "
    .. "current directory) and return its exit status and output. Each call has a time "
    .. "limit: %s (%d ms) by default, at most %s (%d ms). When a command needs longer — a "
    .. "build, a full test suite, or a call that came back with exit 124 (timed out) — ask "
    .. "for more time with a larger timeoutMs, up to %d.")
    :format(minutes(b.default_ms), b.default_ms, minutes(b.max_ms), b.max_ms, b.max_ms)
  local fields = {
    { "command", "string", "The command, run with bash -c.", required = true },
    { "timeoutMs", "integer", ("Time limit in milliseconds (default %d, "
      .. "maximum %d; larger values are cut to the maximum)."):format(b.default_ms, b.max_ms) },
  }
  if can and can.processes then
    description = description .. " A command that must keep running — a dev server, a watcher — "
      .. "goes with run_in_background: it is started and not awaited, and you get its process id "
      .. "(read its output with process_logs, end it with process_kill, show a port it listens on "
      .. "with expose_port). A command of a call without it ends with the call, its children too."
    fields[#fields + 1] = { "run_in_background", "boolean", "Start the command in the background and return its "
      .. "process id (no time limit of the call; it ends with process_kill or when the sandbox sleeps)." }
  end
  return tool_schema.tool("bash", description, fields)
end

function M.call(ex, snap, input, ctx, def)
  local command = input.command
  if type(command) ~= "string" or command:match("^%s*$") then
    return { kind = "input", content = "bash needs {\"command\": \"…\"}: the command was missing or empty", is_error = true }
  end
  if input.run_in_background == true then return processes.start(ex, snap, command, ctx, def) end
  local requested = input.timeoutMs
  local timeout = type(requested) == "number" and budget.clamp(snap, requested) or nil
  local result, err = ex:exec(command, {
    timeout_ms = timeout, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap,
  })
  if not result then return nil, err end
  return { kind = "result", content = result.text or "", is_error = false, result = result }
end

M.TOOLS = {
  { name = "bash", reaches = { "executor", "processes" }, policy = "timeouts.bash, agents.processes",
    help = "a command in the workspace; run_in_background where the executor has processes",
    definition = M.definition, call = M.call },
}

return M
